#version 460
/* Each row's k largest of n values (row stride ld), largest first; the
 * first of equals is kept and NaNs are skipped, as the CPU's dfl_top_k.
 * k passes, each the largest (value, then lowest index) of what comes after
 * the previous pass's pick in that order. vals/idx [rows][k]; a slot with
 * nothing left gets index −1. One workgroup a row. */
#define LOCAL 256u
layout (local_size_x = 256) in;

#include "common.glsl"

layout (push_constant) uniform Args {
  Floats x;
  Floats vals;
  Ints idx;
  uint rows, n, ld, k;
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
  uint r = gl_WorkGroupID.x, t = gl_LocalInvocationIndex;
  float last_v = 0.0;
  int last_i = -1;

  for (uint pass = 0u; pass < p.k; pass++) {
    float bv = 0.0;
    int bi = -1;
    for (uint c = t; c < p.n; c += LOCAL) {
      float v = p.x.v[r * p.ld + c];
      int i = int (c);
      if (isnan (v))
        continue;
      if (pass > 0u && !(last_i >= 0 && (v < last_v || (v == last_v && i > last_i))))
        continue;
      if (before (v, i, bv, bi)) {
        bv = v;
        bi = i;
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
    last_v = best_v[0];
    last_i = best_i[0];
    if (t == 0u) {
      p.vals.v[r * p.k + pass] = last_v;
      p.idx.v[r * p.k + pass] = last_i;
    }
    barrier ();
  }
}
