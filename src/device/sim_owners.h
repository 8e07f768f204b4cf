/* The owners of sim allocations, as one process watches them (internal).
 *
 * The sim backend must notice an owner's death to give its memory back, and
 * checking /proc for every owner on every query was the backend's main cost
 * (a monitor asking 8 devices 10 times a second about 200 processes read
 * /proc 32,000 times a second). So each owner is verified once through /proc
 * (pid and start time, see vram_proc_alive) and then held by a pidfd, which
 * turns readable when the process exits, zombie or not; the pidfds sit in
 * one epoll set, so "has any owner died?" is one epoll_wait whatever their
 * number. Owners beyond the pidfd budget (a quarter of RLIMIT_NOFILE), or
 * all of them on a kernel without pidfd_open, are checked through /proc on
 * every call, as before. Command names are read once per owner.
 *
 * Not thread-safe: the sim context's lock guards it. */
#ifndef VRAM_DEVICE_SIM_OWNERS_H
#define VRAM_DEVICE_SIM_OWNERS_H

#include "core/map.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    uint64_t start_time;
    int pidfd;  /* -1: checked through /proc */
    bool alive; /* as of the last vram_sim_owners_died or creation */
    bool seen;  /* met by the current scan (vram_sim_owners_unmark .. sweep) */
    bool self;  /* the calling process: alive, never checked */
    bool named;
    char name[64];
} sim_owner_t;

typedef struct {
    sim_owner_t *list;
    size_t count, cap;
    vram_map_t by_pid; /* pid -> index in list */
    int epoll_fd;      /* -1 until the first pidfd */
    size_t pidfds;     /* owners held by a pidfd */
    size_t budget;     /* most pidfds to hold */
    bool no_pidfd;     /* pidfd_open is unavailable here */
} sim_owners_t;

/* An empty set. */
void vram_sim_owners_init(sim_owners_t *o);
/* Closes every descriptor and frees the set; it is empty and usable again.
 * Also right in a child after fork(): it never touches the parent's epoll
 * registrations, only closes the child's copies. */
void vram_sim_owners_clear(sim_owners_t *o);
/* Updates `alive` of every owner; true when one died since it was last
 * checked (its entry stays, dead, until the next sweep). */
bool vram_sim_owners_died(sim_owners_t *o);
/* The owner (pid, start_time), verified and watched on first sight, marked
 * seen. `self`: the calling process, alive without checking. NULL when out of
 * memory, for pid <= 0, or when the set holds another process under this pid
 * (a reused pid): the caller then asks /proc itself. */
sim_owner_t *vram_sim_owners_get(sim_owners_t *o, pid_t pid, uint64_t start_time, bool self);
/* Starts a scan: no owner is seen. */
void vram_sim_owners_unmark(sim_owners_t *o);
/* Ends a scan: forgets owners not seen or dead, closing their pidfds. */
void vram_sim_owners_sweep(sim_owners_t *o);
/* Command name of pid: from its owner entry (read from /proc once), else
 * from /proc now. "" when unknown. */
void vram_sim_owners_name(sim_owners_t *o, pid_t pid, char *buf, size_t len);

#endif
