#version 460
/* Element-wise steps of n values: op 0: a = silu(a) · b; op 1: a += b. */
#define LOCAL 256u
layout (local_size_x = 256) in;

#include "common.glsl"

layout (push_constant) uniform Args {
  Floats a;
  Floats b;
  uint n, op;
} p;

void
main (void)
{
  uint i = flat_group () * LOCAL + gl_LocalInvocationIndex;

  if (i >= p.n)
    return;
  if (p.op == 0u) {
    float g = p.a.v[i];
    p.a.v[i] = g / (1.0 + exp (-g)) * p.b.v[i];
  } else {
    p.a.v[i] += p.b.v[i];
  }
}
