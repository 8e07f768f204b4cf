/* vram_int.h — libvram's internal interface for the front ends (vramd, the
 * CLI, the Slurm plugin), as SQLite's sqliteInt.h stands beside sqlite3.h:
 * the parts of libvram.a they use beyond include/vram.h. Never installed;
 * libvram.so does not export them (it is built with -fvisibility=hidden).
 *
 * A front end includes vram.h, this header, the interfaces of the static
 * libraries built for the front ends (sched/sched.h and watch/watch.h:
 * vram_core; pool/tools/replay.h: vram_pool_tools; daemon/daemon.h: vramd's
 * own, for `vram serve`) and its own headers: never another private header
 * of a module (docs/design.md, "Libraries and headers"). */
#ifndef VRAM_INT_H
#define VRAM_INT_H

#include "vram.h"
#include "core/escape.h"        /* vram_escape_text: client strings to terminals and logs */
#include "core/file.h"          /* bounded file reads, private directories */
#include "core/proc.h"          /* a process's user and command line from /proc */
#include "device/info_json.h"   /* a device and its processes as `vram info --json` */
#include "device/sim.h"         /* the simulated GPUs' state file (`vram sim`) */
#include "plan/estimate_json.h" /* an estimate and a plan as `vram estimate/plan --json` */
#include "plan/gpu_names.h"     /* the error for an unknown GPU name */

#endif
