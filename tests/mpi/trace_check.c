/* Checks trace files (base/trace.h) for tests/mpi/trace.sh: each FILE must parse as JSON (with
 * libjansson) and hold a "traceEvents" array of objects. Prints one line per (pid, category)
 * of complete events: "pid <p> <category> <count>", and "events <n>" per file.
 * Exit status: 0 all parsed, 1 a file is not a trace (one line naming it), 2 usage. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define S_MAX 64

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: trace_check FILE...\n");
        return 2;
    }
    for (int a = 1; a < argc; a++) {
        json_error_t err;
        json_t *root = json_load_file(argv[a], 0, &err);
        if (root == NULL) {
            printf("trace_check: %s: line %d: %s\n", argv[a], err.line, err.text);
            return 1;
        }
        json_t *events = json_object_get(root, "traceEvents");
        if (!json_is_array(events)) {
            printf("trace_check: %s: no traceEvents array\n", argv[a]);
            return 1;
        }
        struct {
            json_int_t pid;
            char cat[32];
            int n;
        } seen[S_MAX];
        int nseen = 0;
        size_t i;
        json_t *ev;
        json_array_foreach(events, i, ev)
        {
            if (!json_is_object(ev)) {
                printf("trace_check: %s: event %zu is not an object\n", argv[a], i);
                return 1;
            }
            const char *ph = json_string_value(json_object_get(ev, "ph"));
            const char *cat = json_string_value(json_object_get(ev, "cat"));
            if (ph == NULL || strcmp(ph, "X") != 0 || cat == NULL)
                continue;
            json_int_t pid = json_integer_value(json_object_get(ev, "pid"));
            int k = 0;
            while (k < nseen && !(seen[k].pid == pid && strcmp(seen[k].cat, cat) == 0))
                k++;
            if (k == nseen && nseen < S_MAX) {
                seen[k].pid = pid;
                snprintf(seen[k].cat, sizeof seen[k].cat, "%s", cat);
                seen[k].n = 0;
                nseen++;
            }
            if (k < nseen)
                seen[k].n++;
        }
        printf("%s: events %zu\n", argv[a], json_array_size(events));
        for (int k = 0; k < nseen; k++)
            printf("pid %lld %s %d\n", (long long)seen[k].pid, seen[k].cat, seen[k].n);
        json_decref(root);
    }
    return 0;
}
