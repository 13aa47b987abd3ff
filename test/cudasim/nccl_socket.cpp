// nccl_socket.cpp: the socket transport of nccl_socket.h.
#include "test/cudasim/nccl_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <deque>

#include "test/cudasim/sim.h"

namespace cudasim {

// What the unique id holds in this transport.
struct SockId {
  char magic[8];  // "cudasimS"
  char host[64];
  uint16_t port;
  uint64_t nonce;
};
static_assert(sizeof(SockId) <= sizeof(ncclUniqueId), "the socket id must fit a ncclUniqueId");

struct SockComm {
  int rank, size;
  std::vector<int> fds;  // hub: a connection per rank (its own unused); others: fds[0] to the hub
  pthread_t worker;
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  std::deque<std::pair<std::function<void()>, std::atomic<int>*>> jobs;
  int stopping = 0;
};

static int pending_listen_fd = -1;  // rank 0's listener, opened by sock_unique_id

static void send_all(int fd, const void* p, size_t n) {
  const char* c = (const char*)p;
  while (n) {
    ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fatal("nccl", "socket transport: sending to a peer failed (%s): a rank has exited", strerror(errno));
    c += k, n -= (size_t)k;
  }
}
static void recv_all(int fd, void* p, size_t n) {
  char* c = (char*)p;
  while (n) {
    ssize_t k = recv(fd, c, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) fatal("nccl", "socket transport: a peer closed its connection (%s): a rank has exited", k ? strerror(errno) : "end of stream");
    c += k, n -= (size_t)k;
  }
}

// A listening TCP socket on host:port (port 0: any free one); returns the fd, sets *port.
static int listen_on(const char* host, uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) fatal("nccl", "socket transport: socket() failed: %s", strerror(errno));
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(*port);
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
    struct hostent* h = gethostbyname(host);
    if (!h) fatal("nccl", "socket transport: cannot resolve '%s'", host);
    memcpy(&a.sin_addr, h->h_addr_list[0], sizeof a.sin_addr);
  }
  if (bind(fd, (struct sockaddr*)&a, sizeof a) != 0 || listen(fd, 1024) != 0)
    fatal("nccl", "socket transport: cannot listen on %s:%u: %s", host, *port, strerror(errno));
  socklen_t len = sizeof a;
  getsockname(fd, (struct sockaddr*)&a, &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// Connects to host:port, retrying for up to two minutes (the hub may not be listening yet).
static int connect_to(const char* host, uint16_t port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
    struct hostent* h = gethostbyname(host);
    if (!h) fatal("nccl", "socket transport: cannot resolve '%s'", host);
    memcpy(&a.sin_addr, h->h_addr_list[0], sizeof a.sin_addr);
  }
  for (int tries = 0; tries < 1200; tries++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) fatal("nccl", "socket transport: socket() failed: %s", strerror(errno));
    if (connect(fd, (struct sockaddr*)&a, sizeof a) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    close(fd);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  fatal("nccl", "socket transport: no rank 0 listening at %s:%u after 120 s", host, port);
}

static void* worker_main(void* arg) {
  SockComm* c = (SockComm*)arg;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (c->jobs.empty() && !c->stopping) pthread_cond_wait(&c->cv, &c->mu);
    if (c->jobs.empty()) break;
    auto job = std::move(c->jobs.front());
    c->jobs.pop_front();
    pthread_mutex_unlock(&c->mu);
    job.first();
    *job.second = 1;
    pthread_mutex_lock(&c->mu);
  }
  pthread_mutex_unlock(&c->mu);
  return nullptr;
}

// The hub (rank 0) accepts size-1 connections on lfd; each peer first sends its rank and the
// run's nonce. Everyone else connects to host:port and sends them.
static SockComm* make_comm(int rank, int size, int lfd, const char* host, uint16_t port, uint64_t nonce) {
  SockComm* c = new SockComm();
  c->rank = rank, c->size = size;
  c->fds.assign(size, -1);
  if (rank == 0) {
    for (int i = 1; i < size; i++) {
      int fd = accept(lfd, nullptr, nullptr);
      if (fd < 0) fatal("nccl", "socket transport: accept failed: %s", strerror(errno));
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      int32_t r;
      uint64_t n;
      recv_all(fd, &r, sizeof r);
      recv_all(fd, &n, sizeof n);
      if (n != nonce || r <= 0 || r >= size || c->fds[r] >= 0)
        fatal("nccl", "socket transport: a connection claims rank %d of another run or twice", (int)r);
      c->fds[r] = fd;
    }
  } else {
    int fd = connect_to(host, port);
    int32_t r = rank;
    send_all(fd, &r, sizeof r);
    send_all(fd, &nonce, sizeof nonce);
    c->fds[0] = fd;
  }
  if (pthread_create(&c->worker, nullptr, worker_main, c)) fatal("nccl", "cannot start a communicator thread");
  return c;
}

void sock_unique_id(ncclUniqueId* id) {
  SockId s;
  memset(&s, 0, sizeof s);
  memcpy(s.magic, "cudasimS", 8);
  const char* env = getenv("NCCL_COMM_ID");
  if (env && *env) {  // host:port, the same on every rank
    const char* colon = strrchr(env, ':');
    if (!colon || colon == env || (size_t)(colon - env) >= sizeof s.host)
      fatal("nccl", "NCCL_COMM_ID='%s' is not host:port", env);
    memcpy(s.host, env, (size_t)(colon - env));
    s.port = (uint16_t)atoi(colon + 1);
  } else {  // rank 0: a port of its own, carried to the others by the id (the --init-dir file)
    snprintf(s.host, sizeof s.host, "127.0.0.1");
    if (pending_listen_fd >= 0) close(pending_listen_fd);
    pending_listen_fd = listen_on(s.host, &s.port);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s.nonce = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ ((uint64_t)ts.tv_sec << 40);
  }
  memset(id, 0, sizeof *id);
  memcpy(id, &s, sizeof s);
}

SockComm* sock_init(int nranks, const ncclUniqueId& id, int rank) {
  SockId s;
  memcpy(&s, &id, sizeof s);
  if (memcmp(s.magic, "cudasimS", 8)) fatal("nccl", "ncclCommInitRank: the unique id was not made by this simulator");
  int lfd = -1;
  if (rank == 0) {
    if (pending_listen_fd >= 0) {
      lfd = pending_listen_fd;
      pending_listen_fd = -1;
    } else {
      uint16_t port = s.port;
      lfd = listen_on(s.host, &port);
    }
  }
  SockComm* c = make_comm(rank, nranks, lfd, s.host, s.port, s.nonce);
  if (lfd >= 0) close(lfd);
  return c;
}

void sock_gather(SockComm* c, const void* mine, size_t bytes, void* all) {
  if (c->rank != 0) {
    send_all(c->fds[0], mine, bytes);
    return;
  }
  memcpy(all, mine, bytes);
  for (int r = 1; r < c->size; r++) recv_all(c->fds[r], (char*)all + (size_t)r * bytes, bytes);
}

void sock_scatter(SockComm* c, const void* all, size_t bytes, void* mine) {
  if (c->rank != 0) {
    recv_all(c->fds[0], mine, bytes);
    return;
  }
  for (int r = 1; r < c->size; r++) send_all(c->fds[r], (const char*)all + (size_t)r * bytes, bytes);
  memmove(mine, all, bytes);
}

void sock_bcast(SockComm* c, void* buf, size_t bytes) {
  if (c->rank != 0) {
    recv_all(c->fds[0], buf, bytes);
    return;
  }
  for (int r = 1; r < c->size; r++) send_all(c->fds[r], buf, bytes);
}

SockComm* sock_split(SockComm* parent, int color, int key, int* new_rank, int* new_size) {
  struct Entry {
    int32_t color, key;
    uint16_t port;
  };
  // Every rank listens (it may become its group's hub) and reports (color, key, port).
  uint16_t port = 0;
  int lfd = color >= 0 ? listen_on("127.0.0.1", &port) : -1;
  Entry mine = {color, key, port};
  std::vector<Entry> all(parent->size);
  sock_gather(parent, &mine, sizeof mine, all.data());
  struct Reply {
    int32_t rank, size;
    uint16_t hub_port;
  };
  std::vector<Reply> replies(parent->size);
  if (parent->rank == 0) {
    for (int r = 0; r < parent->size; r++) {
      if (all[r].color < 0) {
        replies[r] = Reply{-1, 0, 0};
        continue;
      }
      // Members of r's color ordered by (key, parent rank), as MPI_Comm_split and NCCL order them.
      int pos = 0, n = 0, hub = -1;
      for (int q = 0; q < parent->size; q++) {
        if (all[q].color != all[r].color) continue;
        n++;
        if (all[q].key < all[r].key || (all[q].key == all[r].key && q < r)) pos++;
        if (hub < 0 || all[q].key < all[hub].key) hub = q;
      }
      replies[r] = Reply{pos, n, all[hub].port};
    }
  }
  Reply me;
  sock_scatter(parent, replies.data(), sizeof me, &me);
  *new_rank = me.rank, *new_size = me.size;
  if (me.rank < 0) return nullptr;
  SockComm* c = make_comm(me.rank, me.size, me.rank == 0 ? lfd : -1, "127.0.0.1", me.hub_port, 0);
  if (lfd >= 0) close(lfd);
  return c;
}

void sock_post(SockComm* c, std::function<void()> job, std::atomic<int>* done) {
  pthread_mutex_lock(&c->mu);
  c->jobs.emplace_back(std::move(job), done);
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

void sock_destroy(SockComm* c) {
  pthread_mutex_lock(&c->mu);
  c->stopping = 1;
  pthread_cond_signal(&c->cv);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->worker, nullptr);
  for (int fd : c->fds)
    if (fd >= 0) close(fd);
  delete c;
}

int sock_rank(const SockComm* c) { return c->rank; }
int sock_size(const SockComm* c) { return c->size; }

}  // namespace cudasim
