// Part 1 of the unary and binary elementwise kernels (Note [Elementwise
// kernels in parts], elementwise_kernels.h).
#include "kernels/cpu/elementwise_kernels.h"

template void kiln::cpu::register_elementwise_kernels<1>();
