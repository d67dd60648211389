// SPDX-License-Identifier: Apache-2.0
//
// LD_PRELOAD shim for Debian 12's User-mode Linux (6.1) on hosts whose XSAVE area is larger
// than the one UML knows (AVX-512, AMX): the host kernel takes NT_X86_XSTATE register writes
// only in its full size (`xstateregs_set` refuses any other length with EFAULT), while UML
// 6.1 writes its own 832-byte layout (x87, SSE, AVX), so the guest's init dies at once with
// "ptrace set fp regs failed, errno = 14".
//
// The shim pads such a write: it reads the traced process's full state, lays UML's bytes over
// the start, keeps the host's own value of every component UML does not know (its bit in
// XSTATE_BV and its bytes), and writes the full size. A component UML does not know is then
// kept per host process, as the host kernel holds it, instead of being zeroed on each resume.
// Every other ptrace call passes through unchanged. Built by tests/support/uml.rs.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifndef NT_X86_XSTATE
#define NT_X86_XSTATE 0x202
#endif

// The XSAVE header follows the 512-byte legacy area; XSTATE_BV is its first word.
#define XSTATE_BV_OFFSET 512
// x87, SSE and AVX: what UML 6.1's layout holds.
#define UML_COMPONENTS 0x7ULL
#define MAX_XSTATE (64 * 1024)

typedef long (*ptrace_fn)(int, pid_t, void *, void *);

static ptrace_fn real_ptrace(void) {
    static ptrace_fn real;
    if (!real)
        real = (ptrace_fn)dlsym(RTLD_NEXT, "ptrace");
    return real;
}

static _Thread_local unsigned char full[MAX_XSTATE] __attribute__((aligned(64)));

long ptrace(enum __ptrace_request request, ...) {
    va_list ap;
    va_start(ap, request);
    pid_t pid = va_arg(ap, pid_t);
    void *addr = va_arg(ap, void *);
    void *data = va_arg(ap, void *);
    va_end(ap);
    ptrace_fn real = real_ptrace();

    if (request == PTRACE_SETREGSET && (uintptr_t)addr == NT_X86_XSTATE && data) {
        struct iovec *given = data;
        struct iovec current = {full, sizeof full};
        if (given->iov_len > XSTATE_BV_OFFSET + 8 &&
            real(PTRACE_GETREGSET, pid, (void *)(uintptr_t)NT_X86_XSTATE, &current) == 0 &&
            current.iov_len > given->iov_len) {
            uint64_t host_bv, uml_bv;
            memcpy(&host_bv, full + XSTATE_BV_OFFSET, 8);
            memcpy(&uml_bv, (unsigned char *)given->iov_base + XSTATE_BV_OFFSET, 8);
            memcpy(full, given->iov_base, given->iov_len);
            uint64_t bv = (uml_bv & UML_COMPONENTS) | (host_bv & ~UML_COMPONENTS);
            memcpy(full + XSTATE_BV_OFFSET, &bv, 8);
            struct iovec padded = {full, current.iov_len};
            return real(PTRACE_SETREGSET, pid, addr, &padded);
        }
    }
    return real(request, pid, addr, data);
}
