// files.h: the rules every file fsdp.c reads and every path it writes follow.
//
//   inputs   opened only when they are regular files (a FIFO or a device is refused, never
//            waited on), their size bounded before anything is allocated for them, the file
//            named in every message; identified (FileId) so that ranks can agree on them and a
//            file changed while a run reads it is noticed;
//   outputs  every name checked at start-up against the file system's limits, so that a name
//            that cannot be created fails before the first step, not after training, and
//            against every input the run reads (path_overlap: by device and inode), so that
//            no output ever is, holds or lies inside an input;
//   locks    a run's --save and --export directories locked for the run, so that a second run
//            given the same directory is refused at start-up instead of both writing into it.
//
// Nothing here prints or exits: each returns 0 (or a descriptor) on success and -1 on
// failure, with the reason in err for the caller.
#ifndef FSDP_FILES_H
#define FSDP_FILES_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

// Writes the printf-style message into err (when err is not NULL) and returns -1: how every
// function of infra/ and weights/ reports a failure to its caller.
__attribute__((format(printf, 3, 4))) int set_error(char* err, size_t errlen, const char* fmt, ...);

// open(path, O_RDONLY) of a regular file; -1 with the reason when it is not one or cannot be
// opened. The open itself never blocks (a FIFO without a writer would).
int file_open_regular(const char* path, char* err, size_t errlen);
// The whole of a regular file of at most max_bytes, NUL-terminated, in a malloc'd *text.
int file_read_all(const char* path, size_t max_bytes, char** text, size_t* len, char* err, size_t errlen);

// What identifies an input's contents across ranks and over time: its size, modification time
// and a digest of its first FILE_ID_BYTES bytes (a shard's header and first block), and on this
// host its device and inode. file_identity fills it from an open descriptor (0, or -1 with
// errno). file_unchanged says whether fd is still the file `was` describes (the same device,
// inode, size and modification time: a shard rewritten in place or replaced is caught on its
// next open); file_identity_compare whether two identities (of two ranks) agree in size,
// modification time and digest. Each returns 0, or -1 with what differs in err.
#define FILE_ID_BYTES 5120
typedef struct {
  int64_t size, mtime_ns;
  uint64_t digest, dev, ino;
} FileId;
int file_identity(int fd, FileId* id);
int file_unchanged(int fd, const FileId* was, const char* path, char* err, size_t errlen);
int file_identity_compare(const FileId* a, const FileId* b, char* err, size_t errlen);

// pread / pwrite of exactly n bytes at offset `at`, retrying interrupted and short transfers:
// 0, or -1 with errno (ENOSPC for a write that stops short without an error, 0 for a read that
// reaches the end of the file first).
int file_pread_all(int fd, void* buf, size_t n, off_t at);
int file_pwrite_all(int fd, const void* buf, size_t n, off_t at);

// Whether the name path + suffix (suffix "" or a name the run derives, such as ".tmp" or
// "/step_00000001.tmp/complete.json.part") fits the file system: at most PATH_MAX bytes in all
// and each component at most the NAME_MAX of the directory that holds it. opt names the
// option in the message.
int path_fits(const char* opt, const char* path, const char* suffix, char* err, size_t errlen);

// Whether writing the output path `out` could destroy the input `in`, compared by device and
// inode with links resolved (a link, a hard link or another spelling of the same path is the
// same file): 1 when they are the same file or directory, 2 when out is a directory that holds
// in, 3 when out lies inside the directory in; 0 when none of these (an input that does not
// exist has nothing to lose; an output that does not exist yet is judged by its directory).
int path_overlap(const char* out, const char* in);

// rename(from, to) that fails (EEXIST) instead of replacing an existing `to`.
int rename_noreplace(const char* from, const char* to);

// Whether path names anything (a dangling link too), and whether it is a directory (following
// links).
int file_exists(const char* path);
int file_is_dir(const char* path);
// Makes the renames and new names inside dir durable: fsync of the directory (best effort: not
// every file system syncs directories). dir_sync_parent does it for the directory holding path.
void dir_sync(const char* dir);
void dir_sync_parent(const char* path);
// Removes the n named entries of dir, then dir itself, which fails (the result of rmdir: 0 or
// -1) when it holds anything else: only files the caller knows as its own are ever deleted. 0
// when dir does not exist; -1 (ELOOP) when dir is a symbolic link, which is never followed.
int dir_remove_named(const char* dir, const char* const* names, size_t n);

// Takes the lock of directory dir for this process, held until it exits: an advisory lock
// (flock) on the file "<dir>.lock" beside it (not inside: a save renames the directory). The
// file records the holder's pid, host and start time. When another process holds it, -1 with
// the holder named. A lock file left by a run that crashed is not held (the kernel drops an
// flock with its process), so it is taken over, with a note in *note (may be NULL). A lock
// file that is not one of ours is never touched. At a normal exit the file is removed.
// On NFS, flock is carried by the server's lock manager (NFSv4, or NLM for v3), so runs on
// two hosts see each other's locks; a mount with -o nolock (or local_lock=all) keeps locks
// local to one host, and then only runs on the same host are refused.
int dir_lock(const char* opt, const char* dir, char* note, size_t notelen, char* err, size_t errlen);
#endif
