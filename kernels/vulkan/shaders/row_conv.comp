#version 460
/* The drafter's grouped causal row convolution:
 *   y[r][i] = Σ_{o < min(kernel, r+1)} (base[o][i] + dyn[r][o][i / group]) · x[r−o][i]
 * x, y [rows][dim] (y is not x); base [kernel][dim]; dyn rows of dyn_stride
 * floats holding [kernel][dim / group]. One invocation an element. */
#define LOCAL 256u
layout (local_size_x = 256) in;

#include "common.glsl"

layout (push_constant) uniform Args {
  Floats x;
  Floats base;
  Floats dyn;
  Floats y;
  uint rows, dim, group_size, kernel, dyn_stride;
} p;

void
main (void)
{
  uint id = flat_group () * LOCAL + gl_LocalInvocationIndex;
  uint r = id / p.dim, i = id % p.dim, groups = p.dim / p.group_size;
  float acc = 0.0;

  if (r >= p.rows)
    return;
  for (uint o = 0u; o < min (p.kernel, r + 1u); o++) {
    float k = p.dyn.v[r * p.dyn_stride + o * groups + i / p.group_size];
    acc += (p.base.v[o * p.dim + i] + k) * p.x.v[(r - o) * p.dim + i];
  }
  p.y.v[id] = acc;
}
