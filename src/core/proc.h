/* Facts about processes from /proc, shared by the device layer (sim owners,
 * process names) and the scheduler (job liveness, process trees). */
#ifndef VRAM_CORE_PROC_H
#define VRAM_CORE_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Start time of pid in clock ticks since boot (/proc/<pid>/stat field 22),
 * never 0 for a live process: with the pid it names a process uniquely, even
 * after the pid is reused. 0 when the process does not exist. */
uint64_t vram_proc_start_time(pid_t pid);
/* true while a process with this pid and start time runs (0 matches any start
 * time). A zombie counts as gone: it has exited and holds no memory. */
bool vram_proc_alive(pid_t pid, uint64_t start_time);
/* A pidfd for pid (close-on-exec by definition); -1 with errno set when
 * there is none (the process is gone, or ENOSYS/EPERM: an old kernel or a
 * seccomp filter). */
int vram_pid_open_fd(pid_t pid);
/* true once the process behind pidfd has exited (never blocks). */
bool vram_pid_fd_exited(int pidfd);
/* Parent pid; 0 when unknown. */
pid_t vram_proc_parent(pid_t pid);
/* Real uid of a process (/proc/<pid>/status) and whether it is a kernel
 * thread (PF_KTHREAD in /proc/<pid>/stat); false when it does not exist. */
bool vram_proc_owner(pid_t pid, uid_t *uid, bool *kernel_thread);
/* Command name from /proc/<pid>/comm; "" when unknown. */
void vram_proc_name(pid_t pid, char *buf, size_t len);
/* The command line, arguments joined by spaces; "" when unreadable. */
void vram_proc_command(pid_t pid, char *buf, size_t len);
/* Login name of the process's owner, its uid when unnamed, "" when gone. */
void vram_proc_user(pid_t pid, char *buf, size_t len);
/* Login name of uid, else the number; "?" for (uid_t)-1 (unknown). */
void vram_user_name(uid_t uid, char *buf, size_t len);

#endif
