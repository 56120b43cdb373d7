/* gst-dflash — what every Vulkan kernel shares: buffers reached by device
 * address (push constants carry the addresses, so no descriptor sets), and
 * the element types of a weight matrix.
 *
 * Weights of 16 bits stay 16-bit in device memory on every device: they are
 * read as 32-bit words holding two elements (little-endian, the even element
 * in the low half) and widened here, exactly (F16 by unpackHalf2x16, BF16 by
 * a shift), so no 16-bit storage feature is needed to hold them.
 */
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_control_flow_attributes : require

layout (buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float v[]; };
layout (buffer_reference, std430, buffer_reference_align = 4) buffer Words { uint v[]; };
layout (buffer_reference, std430, buffer_reference_align = 4) buffer Ints { int v[]; };
/* scratch that other invocations of the workgroup read after a barrier:
 * coherent, so no stale cache line serves it */
layout (buffer_reference, std430, buffer_reference_align = 4) coherent buffer SharedFloats {
  float v[];
};

#define DFL_F32 0u
#define DFL_F16 1u
#define DFL_BF16 2u

float
half_of (uint bits16, uint type)
{
  return type == DFL_F16 ? unpackHalf2x16 (bits16).x : uintBitsToFloat (bits16 << 16);
}

/* Element e of a matrix of `type`. */
float
weight_at (Words w, uint type, uint e)
{
  if (type == DFL_F32)
    return uintBitsToFloat (w.v[e]);
  uint word = w.v[e >> 1];
  return half_of ((e & 1u) != 0u ? word >> 16 : word & 0xffffu, type);
}

/* Elements e and e + 1, e even. */
vec2
weight_pair (Words w, uint type, uint e)
{
  if (type == DFL_F32)
    return vec2 (uintBitsToFloat (w.v[e]), uintBitsToFloat (w.v[e + 1u]));
  uint word = w.v[e >> 1];
  return vec2 (half_of (word & 0xffffu, type), half_of (word >> 16, type));
}

/* A flat index over a 2-D grid of workgroups (a dimension holds at most
 * 65535 of them): the host spreads a long range over y. */
uint
flat_group (void)
{
  return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}
