#version 460
/* y[r][o] (+)= x[r] · W[o] for r < rows, o < n_out: a projection by a weight
 * matrix [rows][cols] in F32, F16 or BF16, accumulated in F32.
 *
 * An output o for up to MT rows is made by a group of invocations that walk
 * W[o] once (two elements a step, the words of 16-bit weights side by side)
 * keeping one sum per row, so a block's rows share each read of the weights.
 * With subgroups (DFL_SUBGROUP) the group is a subgroup, summed by
 * subgroupAdd with no barrier: a workgroup makes `per_group` outputs (64 /
 * the device's subgroup size; its subgroups take them in turn, whatever size
 * they come in). Without, the group is the workgroup, summed in shared
 * memory, one output a workgroup (per_group 1). Workgroups: x·y over the
 * outputs (flat_group), z over tiles of MT rows. */
#define LOCAL 64u
#define MT 16u
layout (local_size_x = 64) in;

#include "common.glsl"
#ifdef DFL_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

layout (push_constant) uniform Args {
  Words w;
  Floats x;
  Floats y;
  uint type, cols, rows, ldx, ldy, n_out, accumulate, per_group, quads;
} p;

layout (buffer_reference, std430, buffer_reference_align = 16) buffer Vec4s { vec4 v[]; };
layout (buffer_reference, std430, buffer_reference_align = 8) buffer UVec2s { uvec2 v[]; };

vec4
weight_quad (uint type, uint e)
{
  if (type == DFL_F32)
    return Vec4s (p.w).v[e >> 2];
  uvec2 q = UVec2s (p.w).v[e >> 2];
  return vec4 (half_of (q.x & 0xffffu, type), half_of (q.x >> 16, type),
               half_of (q.y & 0xffffu, type), half_of (q.y >> 16, type));
}

/* one output's sums over lanes t, t + lanes, … of its weight row */
void
dot_rows (uint o, uint t, uint lanes, uint r0, uint nr, inout float acc[MT])
{
  uint base = o * p.cols;

  [[unroll]] for (uint r = 0u; r < MT; r++)
    acc[r] = 0.0;
  if (p.quads != 0u) {
    /* four elements a step where the host found rows and addresses aligned */
    Vec4s x4 = Vec4s (p.x);
    for (uint i = 4u * t; i < p.cols; i += 4u * lanes) {
      vec4 wv = weight_quad (p.type, base + i);
      [[unroll]] for (uint r = 0u; r < MT; r++)
        if (r < nr)
          acc[r] += dot (wv, x4.v[((r0 + r) * p.ldx + i) >> 2]);
    }
  } else if ((p.cols & 1u) == 0u) {
    for (uint i = 2u * t; i < p.cols; i += 2u * lanes) {
      vec2 wv = weight_pair (p.w, p.type, base + i);
      [[unroll]] for (uint r = 0u; r < MT; r++) {
        if (r < nr) {
          uint xi = (r0 + r) * p.ldx + i;
          acc[r] += wv.x * p.x.v[xi] + wv.y * p.x.v[xi + 1u];
        }
      }
    }
  } else {
    for (uint i = t; i < p.cols; i += lanes) {
      float wv = weight_at (p.w, p.type, base + i);
      [[unroll]] for (uint r = 0u; r < MT; r++)
        if (r < nr)
          acc[r] += wv * p.x.v[(r0 + r) * p.ldx + i];
    }
  }
}

void
store (uint o, uint r, float s)
{
  uint yi = r * p.ldy + o;
  p.y.v[yi] = p.accumulate != 0u ? p.y.v[yi] + s : s;
}

#ifdef DFL_SUBGROUP
void
main (void)
{
  uint r0 = gl_WorkGroupID.z * MT, nr = min (MT, p.rows - r0);
  float acc[MT];

  for (uint s = gl_SubgroupID; s < p.per_group; s += gl_NumSubgroups) {
    uint o = flat_group () * p.per_group + s;
    if (o >= p.n_out)
      break;
    dot_rows (o, gl_SubgroupInvocationID, gl_SubgroupSize, r0, nr, acc);
    [[unroll]] for (uint r = 0u; r < MT; r++) {
      float sum = subgroupAdd (acc[r]);
      if (r < nr && subgroupElect ())
        store (o, r0 + r, sum);
    }
  }
}
#else
shared float part[MT][LOCAL];

void
main (void)
{
  uint o = flat_group (), t = gl_LocalInvocationIndex;
  uint r0 = gl_WorkGroupID.z * MT, nr = min (MT, p.rows - r0);
  float acc[MT];

  if (o >= p.n_out)
    return;
  dot_rows (o, t, LOCAL, r0, nr, acc);
  [[unroll]] for (uint r = 0u; r < MT; r++)
    part[r][t] = acc[r];
  barrier ();
  for (uint s = LOCAL / 2u; s > 0u; s >>= 1) {
    if (t < s) {
      [[unroll]] for (uint r = 0u; r < MT; r++)
        part[r][t] += part[r][t + s];
    }
    barrier ();
  }
  if (t < nr)
    store (o, r0 + t, part[t][0]);
}
#endif
