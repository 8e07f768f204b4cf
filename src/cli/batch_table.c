/* The JSON of a job request's batch table. */
#include "cli/batch_table.h"

json_t *cli_batch_bytes_json(const vram_batch_bytes_t *t, int n)
{
    json_t *list = json_array();
    for (int i = 0; list && i < n; i++)
        json_array_append_new(list, json_pack("{s:I,s:I}", "batch", (json_int_t)t[i].batch, "bytes",
                                              (json_int_t)t[i].bytes));
    return list;
}
