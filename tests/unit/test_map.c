/* The hash map against a plain array model: random puts, gets, takes and
 * iteration over clustered keys (aligned addresses collide in the low bits). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "core/map.h"

#define KEYS 4096

static uint64_t model_value[KEYS];
static bool model_live[KEYS];

static uint64_t key_of(size_t i)
{
    return 0x7f0000000000ull + (uint64_t)i * 512; /* like pool block addresses */
}

static void sum_each(uint64_t key, uint64_t value, void *arg)
{
    uint64_t *acc = arg;
    acc[0]++;
    acc[1] += key ^ value;
}

static void matches_model(void **state)
{
    (void)state;
    vram_map_t map = {0};
    assert_false(vram_map_get(&map, key_of(1), NULL)); /* a zeroed map is empty */
    assert_false(vram_map_put(&map, 0, 1));            /* key 0 is reserved */
    srand(12345);
    size_t live = 0;
    for (int op = 0; op < 400000; op++) {
        size_t i = (size_t)rand() % KEYS;
        uint64_t got = 0;
        switch (rand() % 3) {
        case 0: {
            uint64_t v = ((uint64_t)rand() << 20) ^ (uint64_t)op;
            assert_true(vram_map_put(&map, key_of(i), v));
            if (!model_live[i]) live++;
            model_live[i] = true;
            model_value[i] = v;
            break;
        }
        case 1:
            assert_int_equal(vram_map_get(&map, key_of(i), &got), model_live[i]);
            if (model_live[i]) assert_int_equal(got, model_value[i]);
            break;
        default:
            assert_int_equal(vram_map_take(&map, key_of(i), &got), model_live[i]);
            if (model_live[i]) {
                assert_int_equal(got, model_value[i]);
                model_live[i] = false;
                live--;
            }
        }
        assert_int_equal(map.count, live);
        if (op % 50000 == 0) {
            /* Every live key is still found after all the shifting. */
            uint64_t acc[2] = {0, 0}, want = 0;
            vram_map_each(&map, sum_each, acc);
            for (size_t k = 0; k < KEYS; k++) {
                if (!model_live[k]) continue;
                assert_true(vram_map_get(&map, key_of(k), &got));
                assert_int_equal(got, model_value[k]);
                want += key_of(k) ^ model_value[k];
            }
            assert_int_equal(acc[0], live);
            assert_int_equal(acc[1], want);
        }
    }
    vram_map_clear(&map);
    assert_int_equal(map.count, 0);
    assert_false(vram_map_get(&map, key_of(3), NULL));
}

/* After reserve(n), n puts of new keys never move the slots (so they cannot
 * fail for memory: the pool counts on that after it changed its state). */
static void reserve_makes_room(void **state)
{
    (void)state;
    vram_map_t map = {0};
    assert_true(vram_map_reserve(&map, 1000));
    const vram_map_entry_t *slots = map.slots;
    for (size_t i = 1; i <= 1000; i++)
        assert_true(vram_map_put(&map, key_of(i), i));
    assert_ptr_equal(map.slots, slots);
    assert_true(vram_map_reserve(&map, 100));
    assert_ptr_not_equal(map.slots, slots); /* 1,100 keys pass load 1/2 of 2,048: it grew */
    assert_int_equal(map.count, 1000);
    vram_map_clear(&map);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(matches_model),
                                       cmocka_unit_test(reserve_makes_room)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
