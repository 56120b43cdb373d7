/* gst-dflash — a `dflash` command that is a program of its own.
 *
 * `dflash serve` and `dflash ab` link libraries no other command needs
 * (libsoup, cairo and what those bring: some fifty shared objects, whose
 * loading a cold `dflash generate` would otherwise pay on every run), so
 * each is built as its own executable and `dflash` runs it in its place
 * (dflash.c). DFL_COMMAND names the command's entry point. */
#include <locale.h>

#include "dflash-cli.h"

int
main (int argc, char **argv)
{
  setlocale (LC_ALL, "");
  return DFL_COMMAND (argc, argv);
}
