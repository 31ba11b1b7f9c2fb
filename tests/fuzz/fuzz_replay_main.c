// fuzz_replay_main.c: runs a fuzz target's LLVMFuzzerTestOneInput over files
// and directories of inputs without libFuzzer, so the committed corpus
// (tests/fuzz/corpus/TARGET/) replays in every build, gcc and its sanitizers
// included. Prints one line per input that ran; any finding aborts.
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open '%s'\n", path);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) return 1;
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    int ran = 0, bad = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) != 0) {
            fprintf(stderr, "replay: no such input '%s'\n", argv[a]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            bad |= replay_file(argv[a]);
            ran++;
            continue;
        }
        DIR *d = opendir(argv[a]);
        char **names = NULL;
        size_t count = 0;
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, (count + 1) * sizeof(char *));
            names[count] = malloc(strlen(argv[a]) + strlen(e->d_name) + 2);
            sprintf(names[count++], "%s/%s", argv[a], e->d_name);
        }
        if (d) closedir(d);
        qsort(names, count, sizeof(char *), cmp_names);  // a fixed order: a finding replays the same way
        for (size_t i = 0; i < count; i++) {
            bad |= replay_file(names[i]);
            ran++;
            free(names[i]);
        }
        free(names);
    }
    printf("replayed %d inputs\n", ran);
    return bad;
}
