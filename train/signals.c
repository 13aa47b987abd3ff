// signals.c: stopping cleanly on SIGTERM, SIGINT or SIGUSR1.
//
// A scheduler that preempts a job or reaches its time limit sends a signal first (Slurm:
// SIGTERM, KillWait seconds before SIGKILL; or the signal of --signal, ahead of the limit). The
// handler only notes it; the next step carries it in its inputs and sums it over the ranks on the
// device with the step's token count (train/step.c), so every rank learns it with that step's
// outcome, and all of them stop after the same step, save a checkpoint (with --save), and exit
// with EXIT_STOPPED. A second signal ends the process at
// once, with the signal's default action: the save it interrupts leaves the previous
// checkpoint intact (fsdp/checkpoint.c).
//
// Who receives what: srun delivers a job's signals to every task itself. OpenMPI's mpirun
// (4.1) forwards SIGUSR1 and SIGUSR2 (and SIGTSTP, SIGCONT) to every rank at once; it answers
// SIGTERM and SIGINT itself, sending the ranks SIGTERM after odls_base_sigkill_timeout seconds
// (1 by default) and SIGKILL as long after that: under mpirun, send SIGUSR1 (with sbatch
// --signal=B:USR1@120, the batch script passes it to mpirun).
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "infra/dist.h"
#include "train/train.h"

static const int kSignals[3] = {SIGTERM, SIGINT, SIGUSR1};
static const char* const kNames[3] = {"SIGTERM", "SIGINT", "SIGUSR1"};
static volatile sig_atomic_t g_signal = 0;
static char g_message[3][160];  // what the handler writes, made before any signal can come

static void on_signal(int sig) {
  if (g_signal) {  // the second: at once, as if no handler were installed
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  g_signal = sig;
  for (int i = 0; i < 3; i++)
    if (sig == kSignals[i]) {
      ssize_t w = write(STDERR_FILENO, g_message[i], strlen(g_message[i]));  // write: safe in a handler
      (void)w;
    }
}

void stop_signals_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // file and MPI calls go on; the step ends normally
  for (int i = 0; i < 3; i++) {
    if (dist_world() > 1) snprintf(g_message[i], sizeof g_message[i], "[rank %d] ", dist_rank());
    size_t o = strlen(g_message[i]);
    snprintf(g_message[i] + o, sizeof g_message[i] - o, "%s: stopping after this step (a second signal ends the run "
             "at once)\n", kNames[i]);
    sigaction(kSignals[i], &sa, NULL);
  }
}

int64_t stop_signal_word(void) {
  for (int i = 0; i < 3; i++)
    if (g_signal == kSignals[i]) return (int64_t)1 << (16 * i);
  return 0;
}

const char* stop_signal_name(int64_t word) {
  for (int i = 0; i < 3; i++)
    if ((word >> (16 * i)) & 0xffff) return kNames[i];
  return "a signal";
}
