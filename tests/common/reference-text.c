/* gst-dflash — tests: the text the elements' loops must print
 * (reference-text.h). */
#include "reference-text.h"

#include <gst/check/gstcheck.h>

gchar *
dfl_test_reference_text (const gchar *prompt, gint max_new)
{
  const gchar *exe = g_getenv ("DFLASH");
  g_autofree gchar *n = g_strdup_printf ("%d", max_new);
  g_autofree gchar *registry = g_strdup_printf ("%s.dflash-ref", g_getenv ("GST_REGISTRY_1_0"));
  g_autofree gchar *err = NULL;
  g_auto (GStrv) envp = g_get_environ ();
  const gchar *argv[] = { exe, "generate", "--no-draft", "--max-new", n, "--prompt", prompt, NULL };
  gchar *out = NULL;
  GError *error = NULL;
  gint status = 0;

  fail_unless (exe != NULL, "DFLASH is not set (meson sets it to the dflash command)");
  envp = g_environ_setenv (envp, "GST_PLUGIN_PATH_1_0", "", TRUE);
  envp = g_environ_setenv (envp, "GST_REGISTRY_1_0", registry, TRUE);
  fail_unless (g_spawn_sync (NULL, (gchar **) argv, envp, G_SPAWN_DEFAULT, NULL, NULL, &out, &err,
          &status, &error), "running %s: %s", exe, error ? error->message : "?");
  fail_unless (g_spawn_check_wait_status (status, NULL), "dflash generate --no-draft failed: %s", err);
  fail_unless (out && *out, "dflash generate printed no text");
  return out;
}
