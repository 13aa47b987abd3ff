// order.cpp: the stream-order checker of order.h. Happens-before with vector clocks (one
// component per stream) over operations, and a shadow per 4-byte word of each device
// allocation and pinned host block, created when an operation first touches it: (stream,
// number) of the last writer and of the last reader on each of up to kReaders streams (a word
// read by a copy and by a kernel on two streams must be ordered before the next write after
// both, not only the later).
// An access is ordered after an earlier one when they are on the same stream, or when the
// current clock has seen the earlier operation's number on its stream.
#include "test/cudasim/order.h"

#include <stdlib.h>
#include <string.h>

#include <unordered_map>

#include "test/cudasim/exec.h"
#include "test/cudasim/sim.h"

namespace cudasim {

RunningOp* running_op = nullptr;

void clock_join(Clock* a, const Clock& b) {
  for (int i = 0; i < kClockStreams; i++)
    if (b.t[i] > a->t[i]) a->t[i] = b.t[i];
}

const int kReaders = 4;  // the project's streams: compute, all-gather, reduce-scatter, copy
struct Word {
  uint32_t w_seq, r_seq[kReaders];  // 0: none
  uint8_t w_stream, r_stream[kReaders];
  // The last kernel write of each 2-byte half (16-bit values of neighbouring blocks share a
  // word): its launch, block (linear index) and that block's epoch.
  struct {
    uint32_t launch, block, epoch;
  } hb[2];
};

// ---- happens-before between the blocks of a launch (order.h) --------------------------------

int hb_sync_access = 0;
static uint32_t hb_launch_serial = 0;
typedef std::unordered_map<uint32_t, uint32_t> HbClock;  // block (linear index) -> releases acquired
static HbClock hb_clock;                                   // the running block's
static uint32_t hb_epoch = 0;                              // its releases so far
// Per synchronizing word of this launch: what its releases published, and what they had before
// the latest one (what an acquire load that ran before that release saw; `delta` its amount).
struct HbWord {
  HbClock now, before;
  int delta = 0;
};
static std::unordered_map<uintptr_t, HbWord> hb_words;

void hb_launch() {
  hb_launch_serial++;
  hb_words.clear();
}
void hb_block() {
  hb_clock.clear();
  hb_epoch = 0;
}
static void hb_join(HbClock* into, const HbClock& from) {
  for (const auto& e : from) {
    uint32_t& x = (*into)[e.first];
    if (e.second > x) x = e.second;
  }
}
void hb_acquire(const void* word) {
  auto it = hb_words.find((uintptr_t)word);
  if (it != hb_words.end()) hb_join(&hb_clock, it->second.now);
}
int hb_acquire_early(const void* word, int* delta) {
  auto it = hb_words.find((uintptr_t)word);
  if (it == hb_words.end()) return *delta = 0;
  hb_join(&hb_clock, it->second.before);
  *delta = it->second.delta;
  return 1;
}
void hb_release(const void* word, int delta) {
  HbWord& w = hb_words[(uintptr_t)word];
  w.before = w.now;
  w.delta = delta;
  hb_join(&w.now, hb_clock);
  w.now[(uint32_t)ex.block_linear] = ++hb_epoch;  // covers this block's writes of epochs below it
}

static void hb_race(const Allocation* al, uintptr_t a, int is_write, uint32_t block) {
  char who[256];
  describe_thread(who, sizeof who);
  report("racecheck", "between blocks: %s %s global memory (device allocation #%llu, byte %zu) that block %u (its linear index) "
         "of this launch wrote, with no acquire of a release made after that write (a flag's ld.acquire, or an "
         "atomic): blocks of a launch run at once on a GPU, in no promised order", who,
         is_write ? "writes" : "reads", (unsigned long long)al->serial, (size_t)(a - al->base), block);
}

static std::unordered_map<uintptr_t, Word*> shadows;  // by allocation base (device thread only)
static const int kNames = 4096;
static const char* names[kClockStreams][kNames];

void order_name(int stream, uint32_t seq, const char* what) {
  if (stream >= 0 && stream < kClockStreams) names[stream][seq % kNames] = what;
}

void order_forget(uintptr_t base) {
  auto it = shadows.find(base);
  if (it == shadows.end()) return;
  free(it->second);
  shadows.erase(it);
}

static const char* name_of(int stream, uint32_t seq) {
  const char* n = names[stream][seq % kNames];
  return n ? n : "an earlier operation";
}

static void race(const char* kind, const Allocation* al, int host, uintptr_t a, int stream, uint32_t seq) {
  char who[256] = "", where[300] = "";
  if (g_cur) {
    describe_thread(who, sizeof who);
    snprintf(where, sizeof where, " (%s)", who);
  }
  report("streamcheck", "%s between streams on %s #%llu (%zu bytes) at byte %zu: %s on stream %d%s "
         "and %s on stream %d, with no event wait or host synchronization ordering them",
         kind, host ? "pinned host block" : "device allocation", (unsigned long long)al->serial, al->bytes,
         (size_t)(a - al->base), running_op->what, running_op->stream,
         where, name_of(stream, seq), stream);
}

void order_access(const void* p, size_t n, int is_write) {
  RunningOp* op = running_op;
  if (!op || op->stream >= kClockStreams || !n) return;
  // Device memory, or pinned host memory that copies on several streams reach (--offload). The
  // host's own reads and writes of pinned memory are not operations and are not seen.
  const Allocation* al = find_allocation(p);
  int host = !al;
  if (host) al = find_pinned(p);
  if (!al) return;  // memcheck reports device accesses outside allocations; pageable memory is the host's
  Word*& sh = shadows[al->base];
  if (!sh) {
    sh = (Word*)calloc(al->bytes / 4 + 1, sizeof(Word));
    if (!sh) fatal("internal", "no memory for the stream-order shadow");
  }
  uintptr_t a = (uintptr_t)p;
  size_t first = (a - al->base) / 4, last = (a + n - 1 - al->base) / 4;
  if (last >= al->bytes / 4 + 1) last = al->bytes / 4;
  for (size_t i = first; i <= last; i++) {
    Word* w = &sh[i];
    if (g_cur && !host && !hb_sync_access) {  // a kernel's access: the blocks' happens-before
      for (int half = 0; half < 2; half++) {
        uintptr_t h0 = al->base + i * 4 + 2 * half;
        if (h0 + 2 <= a || h0 >= a + n) continue;
        auto& tag = w->hb[half];
        if (tag.launch == hb_launch_serial && tag.block != (uint32_t)ex.block_linear) {
          auto it = hb_clock.find(tag.block);
          if (it == hb_clock.end() || it->second <= tag.epoch) {
            hb_race(al, h0, is_write, tag.block);
            tag.launch = 0;  // report a location once
          }
        }
        if (is_write) tag.launch = hb_launch_serial, tag.block = (uint32_t)ex.block_linear, tag.epoch = hb_epoch;
      }
    }
    if (w->w_seq && w->w_stream != op->stream && op->clock.t[w->w_stream] < w->w_seq) {
      race(is_write ? "write after write" : "read after write", al, host, al->base + i * 4, w->w_stream, w->w_seq);
      w->w_seq = 0;  // report a word once
    }
    if (is_write) {
      for (int r = 0; r < kReaders; r++)
        if (w->r_seq[r] && w->r_stream[r] != op->stream && op->clock.t[w->r_stream[r]] < w->r_seq[r]) {
          race("write after read", al, host, al->base + i * 4, w->r_stream[r], w->r_seq[r]);
          break;
        }
      w->w_stream = (uint8_t)op->stream, w->w_seq = op->seq;
      memset(w->r_seq, 0, sizeof w->r_seq);
    } else {
      // This stream's entry, else a free one; a fifth stream (beyond what the project uses)
      // drops the first entry.
      int slot = 0;
      for (int r = 0; r < kReaders; r++)
        if (w->r_seq[r] && w->r_stream[r] == op->stream) { slot = r; goto found; }
      for (int r = 0; r < kReaders; r++)
        if (!w->r_seq[r]) { slot = r; goto found; }
      memmove(&w->r_seq[0], &w->r_seq[1], (kReaders - 1) * sizeof w->r_seq[0]);
      memmove(&w->r_stream[0], &w->r_stream[1], (kReaders - 1) * sizeof w->r_stream[0]);
      slot = kReaders - 1;
    found:
      w->r_stream[slot] = (uint8_t)op->stream, w->r_seq[slot] = op->seq;
    }
  }
}

}  // namespace cudasim
