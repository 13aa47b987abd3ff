// fiber.cpp: the context switch of fiber.h (x86-64 System V; aarch64 would need its own
// ten lines). The saved frame, from the lowest address: MXCSR and x87 control word (8 bytes),
// r15, r14, r13, r12, rbx, rbp, return address.
#include "test/cudasim/fiber.h"

#include <stdint.h>

#if !defined(__x86_64__)
#error "the CUDA simulator's fibers are written for x86-64"
#endif

asm(R"(
  .text
  .globl fiber_switch
  .type fiber_switch, @function
fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq (%rsi), %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size fiber_switch, .-fiber_switch

  .globl fiber_trampoline
  .type fiber_trampoline, @function
fiber_trampoline:
  movq %r13, %rdi
  callq *%r12
  ud2
  .size fiber_trampoline, .-fiber_trampoline
)");

extern "C" void fiber_trampoline(void);

void fiber_init(Fiber* f, void* stack, size_t bytes, void (*fn)(void*), void* arg) {
  // After the switch's `ret` into the trampoline the stack pointer is 16-byte aligned, as the
  // ABI wants before the trampoline's call.
  uintptr_t top = ((uintptr_t)stack + bytes) & ~(uintptr_t)15;
  uint64_t* sp = (uint64_t*)top;
  *--sp = (uint64_t)(uintptr_t)fiber_trampoline;  // return address
  *--sp = 0;                                      // rbp
  *--sp = 0;                                      // rbx
  *--sp = (uint64_t)(uintptr_t)fn;                // r12
  *--sp = (uint64_t)(uintptr_t)arg;               // r13
  *--sp = 0;                                      // r14
  *--sp = 0;                                      // r15
  // The control words the host runs with (round to nearest, exceptions masked).
  uint32_t mxcsr;
  uint16_t fpucw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpucw));
  *--sp = (uint64_t)mxcsr | ((uint64_t)fpucw << 32);
  f->sp = sp;
}
