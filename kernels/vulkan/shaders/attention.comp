#version 460
/* The drafter's block attention, grouped-query: every block row r and query
 * head h (one workgroup each: x = head, y = row) attends over
 *   - the layer's context rows j < n (a ring of `cap` rows [cap][kv_heads][hd];
 *     context row j is ring row (ring_off + j) % cap), of which the first
 *     `masked` are out of the row's window: masked = clamp(anchor_rel + r + 1
 *     − window, 0, n) where window > 0 (anchor_rel: the anchor's position less
 *     the first context row's), and
 *   - every block row (kb, vb [rows][kv_heads][hd]), not causally.
 * Softmax in F32 with the maximum subtracted. Scores go through `scores`
 * ([rows·heads][n + rows]), so the context may be any length. */
#define LOCAL 64u
layout (local_size_x = 64) in;

#include "common.glsl"
#include "reduce.glsl"

layout (push_constant) uniform Args {
  Floats q;
  Floats kc;
  Floats vc;
  Floats kb;
  Floats vb;
  Floats dst;
  SharedFloats scores;
  uint rows, heads, kv_heads, hd, n, ring_off, cap;
  int anchor_rel, window;
  float scale;
} p;

shared float qs[256];

void
main (void)
{
  uint h = gl_WorkGroupID.x, r = gl_WorkGroupID.y, t = gl_LocalInvocationIndex;
  uint g = h / (p.heads / p.kv_heads), hd = p.hd, kvd = p.kv_heads * hd;
  uint width = p.n + p.rows;
  uint sbase = (r * p.heads + h) * width;
  uint masked = 0u;
  float top = -1.0 / 0.0, sum = 0.0;

  if (p.window > 0)
    masked = uint (clamp (p.anchor_rel + int (r) + 1 - p.window, 0, int (p.n)));
  for (uint i = t; i < hd; i += LOCAL)
    qs[i] = p.q.v[(r * p.heads + h) * hd + i];
  barrier ();

  for (uint j = masked + t; j < width; j += LOCAL) {
    uint kbase = j < p.n ? ((p.ring_off + j) % p.cap) * kvd + g * hd : (j - p.n) * kvd + g * hd;
    float s = 0.0;
    if (j < p.n) {
      for (uint i = 0u; i < hd; i++)
        s += qs[i] * p.kc.v[kbase + i];
    } else {
      for (uint i = 0u; i < hd; i++)
        s += qs[i] * p.kb.v[kbase + i];
    }
    s *= p.scale;
    p.scores.v[sbase + j] = s;
    top = max (top, s);
  }
  top = wg_max (top);
  /* each invocation rereads only what it wrote itself */
  for (uint j = masked + t; j < width; j += LOCAL) {
    float e = exp (p.scores.v[sbase + j] - top);
    p.scores.v[sbase + j] = e;
    sum += e;
  }
  sum = wg_sum (sum);
  memoryBarrier ();
  barrier ();

  for (uint i = t; i < hd; i += LOCAL) {
    float acc = 0.0;
    for (uint j = masked; j < p.n; j++)
      acc += p.scores.v[sbase + j] * p.vc.v[((p.ring_off + j) % p.cap) * kvd + g * hd + i];
    for (uint j = 0u; j < p.rows; j++)
      acc += p.scores.v[sbase + p.n + j] * p.vb.v[j * kvd + g * hd + i];
    p.dst.v[(r * p.heads + h) * hd + i] = acc / sum;
  }
}
