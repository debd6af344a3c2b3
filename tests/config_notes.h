/* The loader tests' capture of its news (mcpcfg_options.note): the first 8
 * notes, and how many came. One copy per test program (static). */
#ifndef TESTS_CONFIG_NOTES_H
#define TESTS_CONFIG_NOTES_H

#include <stdio.h>

typedef struct note {
  int what; /* MCPCFG_NOTE_* */
  char path[512];
  unsigned long line;
  char msg[512];
} note;

static note notes[8];
static int nnotes;

static void on_note(int what, const char *path, unsigned long line,
                    const char *msg, void *user_data) {
  (void)user_data;
  if (nnotes < 8) {
    notes[nnotes].what = what;
    snprintf(notes[nnotes].path, sizeof notes[nnotes].path, "%s", path);
    notes[nnotes].line = line;
    snprintf(notes[nnotes].msg, sizeof notes[nnotes].msg, "%s", msg);
  }
  nnotes++;
}

#endif
