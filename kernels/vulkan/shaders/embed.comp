#version 460
/* A block's first rows: out[0] = table[anchor], out[r ≥ 1] = table[mask],
 * the table [vocab][dim] in F32, F16 or BF16. One invocation an element. */
#define LOCAL 256u
layout (local_size_x = 256) in;

#include "common.glsl"

layout (push_constant) uniform Args {
  Words table;
  Floats dst;
  uint type, dim, rows, anchor, mask;
} p;

void
main (void)
{
  uint id = flat_group () * LOCAL + gl_LocalInvocationIndex;
  uint r = id / p.dim, i = id % p.dim;

  if (r >= p.rows)
    return;
  p.dst.v[id] = weight_at (p.table, p.type, (r == 0u ? p.anchor : p.mask) * p.dim + i);
}
