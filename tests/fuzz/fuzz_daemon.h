/* The daemon the HTTP fuzz targets route into: a real scheduler on an
 * in-memory store, two fake devices (80 and 24 GiB) and a fixed clock. */
#ifndef VRAM_FUZZ_DAEMON_H
#define VRAM_FUZZ_DAEMON_H

#include "daemon/daemon.h"

/* Opens st's scheduler once (later calls do nothing). */
void fuzz_daemon_open(vramd_state_t *st);
/* Keeps a running 50 GiB job on device 0, so admission, queueing and
 * degradation are exercised and job routes find something; returns its id.
 * `known` is the id returned before (0 at first). */
int64_t fuzz_daemon_resident(vramd_state_t *st, int64_t known);

#endif
