// The heap settings of a training process: freed activation memory stays in the heap for the
// next step instead of going back to the kernel.
#pragma once

namespace lat {

/// Keeps freed memory in the heap instead of returning it to the kernel: each step allocates
/// and frees the same activation sizes, and fresh pages cost a page fault plus zeroing (about
/// 7% of a step on the nanoGPT-size model without this). glibc only; call once, before
/// training.
void keep_freed_memory();

}  // namespace lat
