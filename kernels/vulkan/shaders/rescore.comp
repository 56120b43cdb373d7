#version 460
/* The selector's chain over `rows` block rows, one workgroup: row j's
 * candidates (idx [rows][k], −1 past the last; their logits vals) are scored
 * logit + Σ_i (P[prev][i] · hp[j][i]) · C[cand][i] (codebooks F16
 * [vocab][rank]), prev the anchor and then each row's choice; strictly
 * above wins, so a tie keeps the earlier candidate. Without a selector
 * (has_selector 0) the choice is the first candidate. ids: chosen [rows]
 * then plain (each row's first candidate) [rows]. The sums run in the CPU
 * path's order, without fused multiply-adds (precise). */
#define LOCAL 64u
layout (local_size_x = 64) in;

#include "common.glsl"

layout (push_constant) uniform Args {
  Floats vals;
  Ints idx;
  Floats hp;
  Words pred;
  Words succ;
  Ints ids;
  uint rows, k, rank, anchor, has_selector;
} p;

shared float score[256];
shared int pick;

void
main (void)
{
  uint t = gl_LocalInvocationIndex;
  uint prev = p.anchor;

  for (uint j = 0u; j < p.rows; j++) {
    uint got = 0u;
    while (got < p.k && p.idx.v[j * p.k + got] >= 0)
      got++;
    int first = got > 0u ? p.idx.v[j * p.k] : 0;
    if (p.has_selector != 0u && got > 0u) {
      for (uint c = t; c < got; c += LOCAL) {
        uint cand = uint (p.idx.v[j * p.k + c]);
        precise float s = 0.0;
        for (uint i = 0u; i < p.rank; i++) {
          precise float pc = weight_at (p.pred, DFL_F16, prev * p.rank + i)
                             * p.hp.v[j * p.rank + i];
          precise float prod = pc * weight_at (p.succ, DFL_F16, cand * p.rank + i);
          s += prod;
        }
        precise float total = s + p.vals.v[j * p.k + c];
        score[c] = total;
      }
      barrier ();
      if (t == 0u) {
        float best = -1.0 / 0.0;
        int tok = first;
        for (uint c = 0u; c < got; c++) {
          if (score[c] > best) {
            best = score[c];
            tok = p.idx.v[j * p.k + c];
          }
        }
        pick = tok;
      }
      barrier ();
      prev = uint (pick);
      barrier ();
    } else {
      prev = uint (first);
    }
    if (t == 0u) {
      p.ids.v[j] = int (prev);
      p.ids.v[p.rows + j] = first;
    }
  }
}
