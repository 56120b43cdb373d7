/* Sums and maxima over a workgroup of LOCAL invocations (LOCAL a power of
 * two, defined before this file). With DFL_SUBGROUP the subgroups reduce
 * first (subgroupAdd / subgroupMax) and one value per subgroup meets in
 * shared memory; without it, a tree in shared memory. Every invocation of
 * the workgroup must call these, and every one gets the result. */
#ifdef DFL_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif

shared float reduce_s[LOCAL];

#ifdef DFL_SUBGROUP
float
wg_sum (float x)
{
  float s = subgroupAdd (x), t = 0.0;
  if (subgroupElect ())
    reduce_s[gl_SubgroupID] = s;
  barrier ();
  for (uint i = 0u; i < gl_NumSubgroups; i++)
    t += reduce_s[i];
  barrier ();
  return t;
}

float
wg_max (float x)
{
  float s = subgroupMax (x), t;
  if (subgroupElect ())
    reduce_s[gl_SubgroupID] = s;
  barrier ();
  t = reduce_s[0];
  for (uint i = 1u; i < gl_NumSubgroups; i++)
    t = max (t, reduce_s[i]);
  barrier ();
  return t;
}
#else
float
wg_sum (float x)
{
  uint i = gl_LocalInvocationIndex;
  float t;
  reduce_s[i] = x;
  barrier ();
  for (uint s = LOCAL / 2u; s > 0u; s >>= 1) {
    if (i < s)
      reduce_s[i] += reduce_s[i + s];
    barrier ();
  }
  t = reduce_s[0];
  barrier ();
  return t;
}

float
wg_max (float x)
{
  uint i = gl_LocalInvocationIndex;
  float t;
  reduce_s[i] = x;
  barrier ();
  for (uint s = LOCAL / 2u; s > 0u; s >>= 1) {
    if (i < s)
      reduce_s[i] = max (reduce_s[i], reduce_s[i + s]);
    barrier ();
  }
  t = reduce_s[0];
  barrier ();
  return t;
}
#endif
