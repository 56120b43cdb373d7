#version 460
/* Each row of `dim`: dst = src / sqrt(mean(src²) + eps) ⊙ w. One workgroup a
 * row (flat_group); dst may be src. */
#define LOCAL 64u
layout (local_size_x = 64) in;

#include "common.glsl"
#include "reduce.glsl"

layout (push_constant) uniform Args {
  Floats dst;
  Floats src;
  Floats w;
  uint rows, dim;
  float eps;
} p;

void
main (void)
{
  uint r = flat_group (), t = gl_LocalInvocationIndex;
  uint base = r * p.dim;
  float ss = 0.0, s;

  if (r >= p.rows)
    return;
  for (uint i = t; i < p.dim; i += LOCAL) {
    float x = p.src.v[base + i];
    ss += x * x;
  }
  ss = wg_sum (ss);
  s = 1.0 / sqrt (ss / float (p.dim) + p.eps);
  for (uint i = t; i < p.dim; i += LOCAL)
    p.dst.v[base + i] = p.src.v[base + i] * s * p.w.v[i];
}
