// files.c: input files, output names and directory locks (see files.h).
#include "infra/files.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int set_error(char* err, size_t errlen, const char* fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

static int full_io(int writing, int fd, void* buf, size_t n, off_t at) {
  size_t done = 0;
  while (done < n) {
    ssize_t r = writing ? pwrite(fd, (char*)buf + done, n - done, at + (off_t)done)
                        : pread(fd, (char*)buf + done, n - done, at + (off_t)done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = writing ? ENOSPC : 0;
      return -1;
    }
    done += (size_t)r;
  }
  return 0;
}
int file_pread_all(int fd, void* buf, size_t n, off_t at) { return full_io(0, fd, buf, n, at); }
int file_pwrite_all(int fd, const void* buf, size_t n, off_t at) { return full_io(1, fd, (void*)buf, n, at); }

static const char* file_kind(mode_t m) {
  return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO (named pipe)" : S_ISCHR(m) ? "a character device"
       : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

// ---- inputs ---------------------------------------------------------------------------------

int file_open_regular(const char* path, char* err, size_t errlen) {
  // O_NONBLOCK: opening a FIFO that no one writes would wait forever; it is refused below.
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return set_error(err, errlen, "cannot open %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return set_error(err, errlen, "cannot read %s: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return set_error(err, errlen, "%s is %s, not a regular file; give the path of a file", path, file_kind(st.st_mode));
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    int e = errno;
    close(fd);
    return set_error(err, errlen, "cannot read %s: %s", path, strerror(e));
  }
  return fd;
}

int file_read_all(const char* path, size_t max_bytes, char** text, size_t* len, char* err, size_t errlen) {
  int fd = file_open_regular(path, err, errlen);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < 0) {
    int e = errno;
    close(fd);
    return set_error(err, errlen, "cannot read %s: %s", path, strerror(e));
  }
  if ((unsigned long long)st.st_size > max_bytes) {
    close(fd);
    return set_error(err, errlen, "%s is %lld bytes, more than the %zu bytes a file of its kind may have; is it the right file?",
                     path, (long long)st.st_size, max_bytes);
  }
  size_t n = (size_t)st.st_size;
  char* buf = malloc(n + 1);
  if (!buf) {
    close(fd);
    return set_error(err, errlen, "out of memory reading %s (%zu bytes)", path, n);
  }
  if (file_pread_all(fd, buf, n, 0)) {
    int e = errno;
    close(fd);
    free(buf);
    return set_error(err, errlen, "reading %s failed: %s", path, e ? strerror(e) : "it became shorter while being read");
  }
  close(fd);
  buf[n] = 0;
  *text = buf, *len = n;
  return 0;
}

int file_identity(int fd, FileId* id) {
  struct stat st;
  if (fstat(fd, &st) != 0) return -1;
  unsigned char head[FILE_ID_BYTES];
  size_t n = st.st_size < (off_t)sizeof head ? (size_t)st.st_size : sizeof head;
  if (file_pread_all(fd, head, n, 0) != 0) return -1;
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
  for (size_t i = 0; i < n; i++) h = (h ^ head[i]) * 0x100000001b3ULL;
  *id = (FileId){.size = (int64_t)st.st_size, .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                 .digest = h, .dev = (uint64_t)st.st_dev, .ino = (uint64_t)st.st_ino};
  return 0;
}

int file_unchanged(int fd, const FileId* was, const char* path, char* err, size_t errlen) {
  struct stat st;
  if (fstat(fd, &st) != 0) return set_error(err, errlen, "cannot read %s: %s", path, strerror(errno));
  int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
  const char* what = (uint64_t)st.st_dev != was->dev || (uint64_t)st.st_ino != was->ino ? "it was replaced by another file"
                     : st.st_size != was->size ? "its size changed"
                     : mtime != was->mtime_ns ? "it was written to (its modification time changed)" : NULL;
  if (!what) return 0;
  return set_error(err, errlen, "%s changed while the run reads it: %s since it was opened and checked. Restore it and "
                   "resume from the last checkpoint", path, what);
}

int file_identity_compare(const FileId* a, const FileId* b, char* err, size_t errlen) {
  if (a->size != b->size) return set_error(err, errlen, "%lld bytes against %lld", (long long)a->size, (long long)b->size);
  if (a->digest != b->digest) return set_error(err, errlen, "the same size but other contents in its first %d bytes", FILE_ID_BYTES);
  if (a->mtime_ns != b->mtime_ns)
    return set_error(err, errlen, "the same size and first bytes but another modification time (%.3f s apart; copies "
                     "must keep their times: cp -p, rsync -t)", (double)(a->mtime_ns > b->mtime_ns ? a->mtime_ns - b->mtime_ns
                                                                        : b->mtime_ns - a->mtime_ns) / 1e9);
  return 0;
}

// ---- output names ---------------------------------------------------------------------------

// NAME_MAX of the directory dir when it exists, else of the nearest existing ancestor (a
// directory the run will create lives on the same file system), else 255.
static long name_max_of(const char* dir) {
  char d[PATH_MAX];
  snprintf(d, sizeof d, "%s", dir[0] ? dir : "/");
  for (;;) {
    errno = 0;
    long n = pathconf(d, _PC_NAME_MAX);
    if (n > 0) return n;
    char* slash = strrchr(d, '/');
    if (!slash) {
      if (!strcmp(d, ".")) return NAME_MAX;
      snprintf(d, sizeof d, ".");
    } else if (slash == d) {
      if (!d[1]) return NAME_MAX;
      d[1] = 0;
    } else {
      *slash = 0;
    }
  }
}

int path_fits(const char* opt, const char* path, const char* suffix, char* err, size_t errlen) {
  size_t n = strlen(path) + strlen(suffix);
  if (n + 1 > PATH_MAX)
    return set_error(err, errlen, "%s %.60s...: the name%s is %zu bytes, more than the %d a path may have (PATH_MAX)", opt, path,
                     suffix[0] ? " the run derives from it" : "", n, PATH_MAX);
  char full[PATH_MAX];
  size_t plen = strlen(path);
  memcpy(full, path, plen);
  memcpy(full + plen, suffix, strlen(suffix) + 1);
  // Each component, checked against the limit of the directory that holds it.
  for (size_t start = 0; start < n;) {
    size_t end = start;
    while (end < n && full[end] != '/') end++;
    size_t len = end - start;
    if (len) {
      char parent[PATH_MAX];
      snprintf(parent, sizeof parent, "%.*s", start ? (int)(start - 1) : 0, full);
      if (!parent[0]) snprintf(parent, sizeof parent, full[0] == '/' ? "/" : ".");
      long max = name_max_of(parent);
      if ((long)len > max)
        return set_error(err, errlen, "%s %.60s%s: the name '%.40s...'%s is %zu bytes, more than the %ld the file system "
                         "allows in %s (NAME_MAX); choose a shorter name", opt, path, strlen(path) > 60 ? "..." : "",
                         full + start, end > strlen(path) ? ", which the run derives from it," : "", len, max, parent);
    }
    start = end + 1;
  }
  return 0;
}

int rename_noreplace(const char* from, const char* to) {
  if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL && errno != ENOSYS) return -1;
  // A file system without RENAME_NOREPLACE: look, then rename (a window, but never a known clobber).
  struct stat st;
  if (lstat(to, &st) == 0) {
    errno = EEXIST;
    return -1;
  }
  return rename(from, to);
}

int file_exists(const char* path) {
  struct stat st;
  return lstat(path, &st) == 0;
}

int file_is_dir(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void dir_sync(const char* dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
}

void dir_sync_parent(const char* path) {
  char parent[PATH_MAX];
  snprintf(parent, sizeof parent, "%s", path);
  char* slash = strrchr(parent, '/');
  if (!slash) snprintf(parent, sizeof parent, ".");
  else if (slash == parent) parent[1] = 0;
  else *slash = 0;
  dir_sync(parent);
}

int dir_remove_named(const char* dir, const char* const* names, size_t n) {
  struct stat st;
  if (lstat(dir, &st) != 0) return 0;
  if (S_ISLNK(st.st_mode)) {  // its names would be those of the link's target
    errno = ELOOP;
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    char path[PATH_MAX + 256];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  return rmdir(dir);
}

// ---- outputs against inputs -----------------------------------------------------------------

// The identities of path (when it exists: *self = 1) or, when it does not exist yet, of its
// parent, and of every directory above, links resolved: chain[0] first, then up to "/".
static int id_chain(const char* path, struct stat* chain, int max, int* self) {
  char real[PATH_MAX], parent[PATH_MAX];
  *self = realpath(path, real) != NULL;
  if (!*self) {
    snprintf(parent, sizeof parent, "%s", path);
    char* slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
    if (!realpath(parent, real)) return 0;
  }
  int n = 0;
  while (n < max && stat(real, &chain[n]) == 0) {
    n++;
    char* slash = strrchr(real, '/');
    if (!slash || !strcmp(real, "/")) break;
    if (slash == real) real[1] = 0;
    else *slash = 0;
  }
  return n;
}

static int same_file(const struct stat* a, const struct stat* b) { return a->st_dev == b->st_dev && a->st_ino == b->st_ino; }

int path_overlap(const char* out, const char* in) {
  struct stat a[128], b[128];
  int self_a, self_b;
  int na = id_chain(out, a, 128, &self_a), nb = id_chain(in, b, 128, &self_b);
  if (!na || !nb || !self_b) return 0;  // an input that is not there has nothing to lose
  if (self_a && same_file(&a[0], &b[0])) return 1;
  if (self_a && S_ISDIR(a[0].st_mode))
    for (int i = 1; i < nb; i++)
      if (same_file(&a[0], &b[i])) return 2;
  if (S_ISDIR(b[0].st_mode))
    for (int i = self_a; i < na; i++)
      if (same_file(&a[i], &b[0])) return 3;
  return 0;
}

// ---- directory locks ------------------------------------------------------------------------

#define LOCK_MAGIC "fsdp.c lock"
#define MAX_LOCKS 4

static struct {
  int fd;
  char path[PATH_MAX];
} held[MAX_LOCKS];
static int nheld;

// At a normal exit: remove the lock files this process holds (only while they are still the
// files it locked), then let the kernel drop the locks.
static void release_locks(void) {
  for (int i = 0; i < nheld; i++) {
    struct stat a, b;
    if (fstat(held[i].fd, &a) == 0 && stat(held[i].path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
      unlink(held[i].path);
    close(held[i].fd);
  }
  nheld = 0;
}

// The holder recorded in a lock file (its first line), or "" when it records none.
static void lock_holder(int fd, char* out, size_t cap) {
  char buf[512];
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  out[0] = 0;
  if (n <= (ssize_t)strlen(LOCK_MAGIC)) return;
  buf[n] = 0;
  buf[strcspn(buf, "\n")] = 0;
  snprintf(out, cap, "%s", buf + strlen(LOCK_MAGIC) + (buf[strlen(LOCK_MAGIC)] == ':' ? 2 : 0));
}

int dir_lock(const char* opt, const char* dir, char* note, size_t notelen, char* err, size_t errlen) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof path, "%s.lock", dir) >= (int)sizeof path)
    return set_error(err, errlen, "%s %s: the name of its lock file is too long", opt, dir);
  if (note && notelen) note[0] = 0;
  if (nheld == MAX_LOCKS) return set_error(err, errlen, "%s %s: more than %d directory locks in one run", opt, dir, MAX_LOCKS);
  for (int attempt = 0; attempt < 10; attempt++) {
    // O_NOFOLLOW: a symbolic link planted at the lock's name is refused, not written through.
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0)
      return set_error(err, errlen, "%s %s: cannot create its lock file %s: %s%s", opt, dir, path, strerror(errno),
                       errno == ELOOP || errno == EISDIR ? " (something else of that name is there: move it away)" : "");
    struct stat st, now;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      return set_error(err, errlen, "%s %s: %s is %s, not a lock file of fsdp.c; move it away", opt, dir, path,
                       file_kind(st.st_mode));
    }
    char holder[512] = "", first[32] = "";
    if (st.st_size > 0) {  // someone's file: only a lock file of ours is ever taken
      ssize_t n = pread(fd, first, strlen(LOCK_MAGIC), 0);
      if (n != (ssize_t)strlen(LOCK_MAGIC) || memcmp(first, LOCK_MAGIC, strlen(LOCK_MAGIC))) {
        close(fd);
        return set_error(err, errlen, "%s %s: %s exists and is not a lock file of fsdp.c (it does not start with \"%s\"); "
                         "move it away", opt, dir, path, LOCK_MAGIC);
      }
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int e = errno;
      lock_holder(fd, holder, sizeof holder);
      close(fd);
      if (e == EWOULDBLOCK)
        return set_error(err, errlen, "%s %s is in use by another run (%s; it holds %s): two runs writing one directory would "
                         "overwrite each other's files. Wait for that run to end, or give this one another directory", opt,
                         dir, holder[0] ? holder : "its pid and host are not recorded yet", path);
      return set_error(err, errlen, "%s %s: cannot lock %s: %s", opt, dir, path, strerror(e));
    }
    // The holder before us may have removed the file between our open and our lock: then the
    // lock is on a name no other run sees, and we try again.
    if (stat(path, &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
      close(fd);
      continue;
    }
    lock_holder(fd, holder, sizeof holder);
    if (holder[0] && note && notelen)
      snprintf(note, notelen, "%s: the lock file %s was left by a run that did not end cleanly (%s); no process holds "
               "it, so this run takes it over", opt, path, holder);
    char host[256] = "?", when[64] = "?", line[512];
    gethostname(host, sizeof host);
    host[sizeof host - 1] = 0;
    time_t t = time(NULL);
    struct tm tm;
    if (localtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    int len = snprintf(line, sizeof line, LOCK_MAGIC ": pid %ld on host %s, since %s\n", (long)getpid(), host, when);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)len, 0) != len) {
      int e = errno;
      close(fd);
      return set_error(err, errlen, "%s %s: cannot write its lock file %s: %s", opt, dir, path, strerror(e));
    }
    static int registered;
    if (!registered) registered = !atexit(release_locks);
    held[nheld].fd = fd;
    snprintf(held[nheld].path, sizeof held[nheld].path, "%s", path);
    nheld++;
    return 0;
  }
  return set_error(err, errlen, "%s %s: its lock file %s keeps being replaced; is another run starting on it?", opt, dir, path);
}
