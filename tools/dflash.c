/* gst-dflash — the `dflash` command: generate text, inspect model files. */
#include <stdio.h>
#include <string.h>
#include <locale.h>

#include "dflash-cli.h"

static const struct {
  const char *name;
  int (*run) (int argc, char **argv);
  const char *summary;
} commands[] = {
  { "generate", dfl_cmd_generate, "decode from a prompt with a Qwen3 target" },
  { "inspect", dfl_cmd_inspect, "show what a checkpoint folder, .gguf file or safetensors file holds" },
  { "draft", dfl_cmd_draft, "run one block and dump it for checking against other implementations" },
  { "route-fit", dfl_cmd_route_fit, "fit a sidecar's router (block or chain each round) on prompts" },
  { "serve", dfl_cmd_serve, "serve the OpenAI API (completions, chat) over the pipeline, by HTTP" },
  { "ab", dfl_cmd_ab, "run two pipeline files on the same prompts and compare tau, acceptance, speed" },
};

static void
usage (FILE *to)
{
  fprintf (to, "Usage: dflash COMMAND [OPTIONS]\n\nCommands:\n");
  for (guint i = 0; i < G_N_ELEMENTS (commands); i++)
    fprintf (to, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf (to, "\n'dflash COMMAND --help' describes a command's options.\n");
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
      return commands[i].run (argc - 1, argv + 1);
  return dfl_cli_fail (DFL_EXIT_USAGE, "unknown command '%s' (see dflash --help)", argv[1]);
}
