// fiber.h: user-level context switching for the simulator's CUDA threads. A fiber is a stack
// and a saved stack pointer; switching saves the callee-saved registers of the System V
// x86-64 ABI (and the SSE/x87 control words) on the old stack and restores them from the new
// one: a handful of instructions, against swapcontext's signal-mask system call.
#pragma once
#include <stddef.h>

struct Fiber {
  void* sp;  // saved stack pointer while the fiber is not running
};

// Prepares `f` to run fn(arg) on the stack [stack, stack + bytes) at its first switch. fn must
// never return: it ends by switching away for good.
void fiber_init(Fiber* f, void* stack, size_t bytes, void (*fn)(void*), void* arg);
// Saves the running context into `from` and resumes `to`.
extern "C" void fiber_switch(Fiber* from, Fiber* to);
