// launch.h: starting without MPI, the host-side part (plain C, no GPU needed).
//
// The CUDA binary runs under mpirun like the CPU one, but it can also be started by Slurm
// (srun) or a torchrun-style launcher without MPI. It then needs two things MPI would give it:
//   1. its place in the job: rank, world size and local rank (which GPU), from the launcher's
//      environment variables (launch_env_detect);
//   2. the NCCL unique id (an opaque blob, 128 bytes) that rank 0 creates and every other rank
//      must receive before ncclCommInitRank. Where NCCL_COMM_ID is set, NCCL handles that
//      itself; otherwise the id goes through a file in a directory all ranks see
//      (--init-dir DIR; launch_exchange_id), named by a run id all ranks agree on
//      (launch_run_id).
//
// No function here prints or exits: each returns 0 on success and -1 on failure, with a
// message in err (naming the variables, values and files involved and what to change) for the
// caller to pass to fatal().
#ifndef FSDP_LAUNCH_H
#define FSDP_LAUNCH_H
#include <stddef.h>

// Reads one environment variable; NULL when it is not set. launch_env_detect uses getenv;
// tests pass their own to inject an environment without setenv.
typedef const char* (*LaunchGetenv)(const char* name, void* ctx);

typedef struct {
  int rank, world;        // 0 <= rank < world
  int local_rank;         // rank on this node (selects the GPU): 0 <= local_rank
  int local_world;        // ranks on this node; 0 when the launcher does not say
  const char* source;     // "openmpi", "slurm", "torchrun" or "none" (static string)
} LaunchEnv;

// Finds rank, world size and local rank from the first launcher whose variables are set, in
// this order:
//   openmpi:  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//             OMPI_COMM_WORLD_LOCAL_SIZE (all four required)
//   slurm:    SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; SLURM_NTASKS_PER_NODE optional
//   torchrun: RANK, WORLD_SIZE, LOCAL_RANK; LOCAL_WORLD_SIZE optional
// A launcher counts as present when any of its required variables is set (an empty value
// counts as unset); a present launcher must then be complete and consistent, it is never
// skipped for a lower one. None present: one rank (0 of 1, local 0 of 1, source "none").
// Errors: a value that is not a decimal integer, a negative rank, a world size below 1, a rank
// not below the world size, a local rank not below the local size, a local size above the
// world size, a partial set (e.g. RANK without WORLD_SIZE). SLURM_NTASKS_PER_NODE is a
// per-node maximum (and srun steps inherit sbatch's), so above SLURM_NTASKS it is clamped.
int launch_env_detect(LaunchEnv* out, char* err, size_t errlen);
int launch_env_detect_from(LaunchEnv* out, LaunchGetenv get, void* ctx, char* err, size_t errlen);

// The run id that names the id file; all ranks of one launch must get the same one, and two
// launches must not share one. From, in order:
//   FSDP_RUN_ID                          (set it yourself: unique per launch)
//   SLURM_JOB_ID[.SLURM_STEP_ID][.rSLURM_RESTART_COUNT]   (srun steps and requeues differ)
//   TORCHELASTIC_RUN_ID[.rTORCHELASTIC_RESTART_COUNT]     (ignored when it is torchrun's
//                                                          default "none")
// None of them with world > 1 is an error telling to set FSDP_RUN_ID; with world == 1 the id
// is "single.<pid>" (one rank needs no exchange). A run id may only hold letters, digits,
// '.', '_' and '-' (it becomes part of a file name), at most LAUNCH_RUN_ID_MAX characters.
#define LAUNCH_RUN_ID_MAX 128
int launch_run_id(char* out, size_t len, int world, char* err, size_t errlen);
int launch_run_id_from(char* out, size_t len, int world, LaunchGetenv get, void* ctx, char* err,
                       size_t errlen);

// The path of the id file: "<dir>/fsdp_id.<run_id>". -1 when it does not fit.
int launch_id_path(char* out, size_t len, const char* dir, const char* run_id);

// Hands the id from rank 0 to every other rank through DIR (a directory every rank sees, on a
// shared file system for several nodes). idlen: at most LAUNCH_ID_MAX bytes. DIR must belong to
// this user and be writable by no one else (else an error with the fix): another user could
// otherwise plant an id file the ranks would take, or a link at the name rank 0 writes.
//   rank 0: writes id[0..idlen) to <dir>/fsdp_id.<run_id> atomically (written to
//           <dir>/.fsdp_id.<run_id>.tmp.<pid>, created with O_EXCL | O_NOFOLLOW and mode 0600,
//           fsynced, renamed without replacing), so a reader sees either no file or the whole
//           one. Anything already at either name is an error, never written through (a launch
//           with the same run id left it: ranks may have read its stale id).
//   others: poll (10 ms, growing to 50 ms between tries) until the file holds an id for THEIR
//           run id and length, and copy it into id. A file whose header names another run id
//           is never accepted (polling goes on); a link, a file of another user, a file written
//           more than LAUNCH_STALE_S before this rank started (an earlier launch's), or a
//           malformed or truncated one (bad magic, wrong length, checksum mismatch) is an
//           error at once. After timeout_s seconds (timeout_s <= 0: one try) -1 with the path,
//           run id and what to check.
// The file format: one text line "fsdp_nccl_id v1 run=<run_id> len=<idlen> fnv=<16 hex>\n"
// followed by the idlen id bytes (fnv: FNV-1a 64 of the id bytes).
#define LAUNCH_ID_MAX 4096
#define LAUNCH_STALE_S 600.0
int launch_exchange_id(const char* dir, const char* run_id, int rank, unsigned char* id,
                       size_t idlen, double timeout_s, char* err, size_t errlen);

// Removes the id file (rank 0; no error when it is already gone). Call it once every rank has
// the id, e.g. when ncclCommInitRank has returned on rank 0 (a collective: every rank has read
// the file by then), or at exit, so that no stale file is left in DIR.
int launch_id_cleanup(const char* dir, const char* run_id, char* err, size_t errlen);
#endif
