#version 460
/* Each row's index of its largest of n values (row stride ld): the first of
 * equals; NaNs never win, and a row whose first value is NaN gives 0, as
 * the CPU's dfl_argmax (whose running best starts at the first value and
 * moves only to a larger one). idx [rows] int32. One workgroup a row. */
#define LOCAL 256u
layout (local_size_x = 256) in;

#include "common.glsl"

layout (push_constant) uniform Args {
  Floats x;
  Ints idx;
  uint rows, n, ld, pad;
} p;

shared float best_v[LOCAL];
shared int best_i[LOCAL];

/* (v, i) before (w, j) in the order: value down, index up; j < 0: nothing */
bool
before (float v, int i, float w, int j)
{
  return i >= 0 && (j < 0 || v > w || (v == w && i < j));
}

void
main (void)
{
  uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x, t = gl_LocalInvocationIndex;
  float bv = 0.0;
  int bi = -1;

  if (r >= p.rows)
    return;
  for (uint c = t; c < p.n; c += LOCAL) {
    float v = p.x.v[r * p.ld + c];
    if (!isnan (v) && before (v, int (c), bv, bi)) {
      bv = v;
      bi = int (c);
    }
  }
  best_v[t] = bv;
  best_i[t] = bi;
  barrier ();
  for (uint s = LOCAL / 2u; s > 0u; s >>= 1) {
    if (t < s && before (best_v[t + s], best_i[t + s], best_v[t], best_i[t])) {
      best_v[t] = best_v[t + s];
      best_i[t] = best_i[t + s];
    }
    barrier ();
  }
  if (t == 0u)
    p.idx.v[r] = isnan (p.x.v[r * p.ld]) || best_i[0] < 0 ? 0 : best_i[0];
}
