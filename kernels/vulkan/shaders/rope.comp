#version 460
/* Half-split (NeoX / Qwen) rope, in place: `rows` rows of `heads` heads of
 * 2·half. The angles come as a table from the host, cs[r] = cos of row r's
 * half angles then their sines, made by the CPU path's own arithmetic, so
 * both paths rotate by the same numbers. One invocation a (row, head, pair). */
#define LOCAL 64u
layout (local_size_x = 64) in;

#include "common.glsl"

layout (push_constant) uniform Args {
  Floats x;
  Floats cs;
  uint rows, heads, half_dim;
} p;

void
main (void)
{
  uint id = flat_group () * LOCAL + gl_LocalInvocationIndex;
  uint i = id % p.half_dim, rh = id / p.half_dim, r = rh / p.heads;

  if (r >= p.rows)
    return;
  uint lo = rh * 2u * p.half_dim + i, hi = lo + p.half_dim;
  float c = p.cs.v[r * 2u * p.half_dim + i], s = p.cs.v[r * 2u * p.half_dim + p.half_dim + i];
  float a = p.x.v[lo], b = p.x.v[hi];
  p.x.v[lo] = a * c - b * s;
  p.x.v[hi] = b * c + a * s;
}
