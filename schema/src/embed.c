/* Build tool: writes a C file defining NAME[] and NAME_len with the bytes
 * of a file.  usage: embed IN OUT NAME */
#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: embed IN OUT NAME\n");
    return 2;
  }
  FILE *in = fopen(argv[1], "rb"), *out = fopen(argv[2], "w");
  if (!in || !out) {
    perror("embed");
    return 1;
  }
  fprintf(out, "#include <stddef.h>\n#include <stdint.h>\n#include \"wkt_set.h\"\n"
               "const uint8_t %s[] = {", argv[3]);
  size_t n = 0;
  int c;
  while ((c = fgetc(in)) != EOF)
    fprintf(out, "%s0x%02x,", n++ % 16 ? "" : "\n  ", (unsigned)c);
  fprintf(out, "\n};\nconst size_t %s_len = %zu;\n", argv[3], n);
  if (ferror(in) || fclose(out)) {
    perror("embed");
    return 1;
  }
  fclose(in);
  return 0;
}
