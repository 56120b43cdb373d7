/* gst-dflash — the spec tests' fixtures (see spec-fixtures.h). */
#include "spec-fixtures.h"

DflTarget *
spec_fixture_target (const char *variant)
{
  g_autofree char *dir = g_build_filename (g_getenv ("DFL_FIXTURES"), "qwen3", variant, NULL);
  g_autoptr (GError) error = NULL;
  DflTarget *t = dfl_target_load (dir, &error);

  g_assert_no_error (error);
  return t;
}

DflDrafterWeights *
spec_fixture_drafter (const DflTarget *t)
{
  g_autofree char *path = g_build_filename (dfl_target_dir (t), "dflash.safetensors", NULL);
  const DflQwen3Config *c = dfl_target_config (t);
  g_autoptr (GError) error = NULL;
  DflDrafterWeights *d = dfl_drafter_weights_open (path, &error);

  g_assert_no_error (error);
  g_assert_true (dfl_drafter_weights_check_target (d, dfl_target_tensors (t), c->tie_word_embeddings,
                                           c->layers, c->hidden, c->vocab, &error));
  return d;
}
