/* Facts about processes from /proc (internal to the device layer). */
#ifndef VRAM_DEVICE_PROC_H
#define VRAM_DEVICE_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Start time of pid in clock ticks since boot (/proc/<pid>/stat field 22):
 * with the pid it names a process uniquely, even after the pid is reused.
 * false when the process does not exist or /proc cannot be read. */
bool vram_proc_start_time(pid_t pid, uint64_t *ticks);
/* true while a process with this pid and start time exists (a start time of
 * 0 matches any process with the pid). */
bool vram_proc_alive(pid_t pid, uint64_t start_time);
/* Command name from /proc/<pid>/comm; "" when unknown. */
void vram_proc_name(pid_t pid, char *buf, size_t len);

#endif
