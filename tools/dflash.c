/* gst-dflash — the `dflash` command: generate text, inspect and quantize model files,
 * and the commands that are programs of their own (dflash-command.c). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <locale.h>
#include <unistd.h>

#include "dflash-cli.h"

/* A command with `run` NULL is the program `dflash-NAME`, looked for beside
 * this one (a build tree) and then in DFL_COMMAND_DIR (installed). */
static const struct {
  const char *name;
  int (*run) (int argc, char **argv);
  const char *summary;
} commands[] = {
  { "generate", dfl_cmd_generate, "decode from a prompt with a Qwen3 target" },
  { "inspect", dfl_cmd_inspect, "show what a checkpoint folder, .gguf file or safetensors file holds" },
  { "quantize", dfl_cmd_quantize, "quantize a GGUF file's matrices (Q8_0, Q4_0, Q4_K, Q4_K_M, Q6_K) into a new one" },
  { "draft", dfl_cmd_draft, "run one block and dump it for checking against other implementations" },
  { "route-fit", dfl_cmd_route_fit, "fit a sidecar's router (block or chain each round) on prompts" },
  { "serve", NULL, "serve the OpenAI API (completions, chat) over the pipeline, by HTTP" },
  { "ab", NULL, "run two pipeline files on the same prompts and compare tau, acceptance, speed" },
};

static void
usage (FILE *to)
{
  fprintf (to, "Usage: dflash COMMAND [OPTIONS]\n\nCommands:\n");
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    fprintf (to, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf (to, "\n'dflash COMMAND --help' describes a command's options.\n");
}

/* Run the program of command `name` with `argv` (argv[0] the command's
 * name, as a command built in gets it); returns only on failure. */
static int
exec_command (const char *name, char **argv)
{
  g_autofree char *program = g_strconcat ("dflash-", name, NULL);
  g_autofree char *self = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree char *self_dir = self ? g_path_get_dirname (self) : NULL;
  const char *dirs[] = { self_dir, DFL_COMMAND_DIR };
  g_autoptr (GString) tried = g_string_new (NULL);

  for (guint i = 0; i < G_N_ELEMENTS (dirs); i++) {
    g_autofree char *path = NULL;
    if (!dirs[i])
      continue;
    path = g_build_filename (dirs[i], program, NULL);
    if (g_file_test (path, G_FILE_TEST_IS_EXECUTABLE)) {
      fflush (NULL);
      execv (path, argv);
      return dfl_cli_fail (DFL_EXIT_ERROR, "%s: cannot run %s: %s", name, path, g_strerror (errno));
    }
    g_string_append_printf (tried, "%s%s", tried->len ? " nor " : "", path);
  }
  return dfl_cli_fail (DFL_EXIT_ERROR, "%s: its program is not installed: neither %s exists", name,
                       tried->str);
}

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "");
  if (argc < 2) {
    usage (stderr);
    return DFL_EXIT_USAGE;
  }
  if (!strcmp (argv[1], "--help") || !strcmp (argv[1], "-h") || !strcmp (argv[1], "help")) {
    usage (stdout);
    return DFL_EXIT_OK;
  }
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    if (!strcmp (argv[1], commands[i].name))
      return commands[i].run ? commands[i].run (argc - 1, argv + 1)
                             : exec_command (commands[i].name, argv + 1);
  return dfl_cli_fail (DFL_EXIT_USAGE, "unknown command '%s' (see dflash --help)", argv[1]);
}
