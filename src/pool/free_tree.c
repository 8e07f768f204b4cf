/* Red-black tree of free blocks, intrusive (the links live in the block).
 * Ordered by (stream, rank, tie, address): best fit for a stream is the first
 * block at or after (stream, rank of the request), one O(log n) descent. */
#include "pool/pool_internal.h"

#include <stdio.h>

#define L(b) ((b)->u.node.left)
#define R(b) ((b)->u.node.right)
#define P(b) ((b)->u.node.parent)

static int key_cmp(const vram_pool_block_t *a, const vram_pool_block_t *b)
{
    if (a->stream != b->stream) return a->stream < b->stream ? -1 : 1;
    if (a->u.node.rank != b->u.node.rank) return a->u.node.rank < b->u.node.rank ? -1 : 1;
    if (a->u.node.tie != b->u.node.tie) return a->u.node.tie < b->u.node.tie ? -1 : 1;
    if (a->addr != b->addr) return a->addr < b->addr ? -1 : 1;
    return 0;
}

static bool is_red(const vram_pool_block_t *b)
{
    return b && b->red;
}

static void rotate_left(vram_free_tree_t *t, vram_pool_block_t *x)
{
    vram_pool_block_t *y = R(x);
    R(x) = L(y);
    if (L(y)) P(L(y)) = x;
    P(y) = P(x);
    if (!P(x))
        t->root = y;
    else if (x == L(P(x)))
        L(P(x)) = y;
    else
        R(P(x)) = y;
    L(y) = x;
    P(x) = y;
}

static void rotate_right(vram_free_tree_t *t, vram_pool_block_t *x)
{
    vram_pool_block_t *y = L(x);
    L(x) = R(y);
    if (R(y)) P(R(y)) = x;
    P(y) = P(x);
    if (!P(x))
        t->root = y;
    else if (x == R(P(x)))
        R(P(x)) = y;
    else
        L(P(x)) = y;
    R(y) = x;
    P(x) = y;
}

void vram_free_tree_insert(vram_free_tree_t *t, vram_pool_block_t *b)
{
    vram_pool_block_t *parent = NULL, *cur = t->root;
    int cmp = 0;
    while (cur) {
        parent = cur;
        cmp = key_cmp(b, cur);
        cur = cmp < 0 ? L(cur) : R(cur);
    }
    L(b) = R(b) = NULL;
    P(b) = parent;
    b->red = true;
    if (!parent)
        t->root = b;
    else if (cmp < 0)
        L(parent) = b;
    else
        R(parent) = b;
    t->count++;

    /* Restore: no red node has a red parent. */
    vram_pool_block_t *x = b;
    while (is_red(P(x))) {
        vram_pool_block_t *p = P(x), *g = P(p);
        if (p == L(g)) {
            vram_pool_block_t *u = R(g);
            if (is_red(u)) {
                p->red = u->red = false;
                g->red = true;
                x = g;
                continue;
            }
            if (x == R(p)) {
                rotate_left(t, p);
                x = p;
                p = P(x);
            }
            p->red = false;
            g->red = true;
            rotate_right(t, g);
        } else {
            vram_pool_block_t *u = L(g);
            if (is_red(u)) {
                p->red = u->red = false;
                g->red = true;
                x = g;
                continue;
            }
            if (x == L(p)) {
                rotate_right(t, p);
                x = p;
                p = P(x);
            }
            p->red = false;
            g->red = true;
            rotate_left(t, g);
        }
    }
    t->root->red = false;
}

static void transplant(vram_free_tree_t *t, vram_pool_block_t *u, vram_pool_block_t *v)
{
    if (!P(u))
        t->root = v;
    else if (u == L(P(u)))
        L(P(u)) = v;
    else
        R(P(u)) = v;
    if (v) P(v) = P(u);
}

static vram_pool_block_t *minimum(vram_pool_block_t *b)
{
    while (L(b))
        b = L(b);
    return b;
}

/* Rebalances after removing a black node; x (maybe NULL) took its place under xp. */
static void remove_fixup(vram_free_tree_t *t, vram_pool_block_t *x, vram_pool_block_t *xp)
{
    while (x != t->root && !is_red(x)) {
        if (x == L(xp)) {
            vram_pool_block_t *w = R(xp);
            if (is_red(w)) {
                w->red = false;
                xp->red = true;
                rotate_left(t, xp);
                w = R(xp);
            }
            if (!is_red(L(w)) && !is_red(R(w))) {
                w->red = true;
                x = xp;
                xp = P(x);
            } else {
                if (!is_red(R(w))) {
                    L(w)->red = false;
                    w->red = true;
                    rotate_right(t, w);
                    w = R(xp);
                }
                w->red = xp->red;
                xp->red = false;
                R(w)->red = false;
                rotate_left(t, xp);
                x = t->root;
                break;
            }
        } else {
            vram_pool_block_t *w = L(xp);
            if (is_red(w)) {
                w->red = false;
                xp->red = true;
                rotate_right(t, xp);
                w = L(xp);
            }
            if (!is_red(L(w)) && !is_red(R(w))) {
                w->red = true;
                x = xp;
                xp = P(x);
            } else {
                if (!is_red(L(w))) {
                    R(w)->red = false;
                    w->red = true;
                    rotate_left(t, w);
                    w = L(xp);
                }
                w->red = xp->red;
                xp->red = false;
                L(w)->red = false;
                rotate_right(t, xp);
                x = t->root;
                break;
            }
        }
    }
    if (x) x->red = false;
}

void vram_free_tree_remove(vram_free_tree_t *t, vram_pool_block_t *z)
{
    vram_pool_block_t *x, *xp;
    bool removed_red = z->red;
    if (!L(z)) {
        x = R(z);
        xp = P(z);
        transplant(t, z, x);
    } else if (!R(z)) {
        x = L(z);
        xp = P(z);
        transplant(t, z, x);
    } else {
        vram_pool_block_t *y = minimum(R(z));
        removed_red = y->red;
        x = R(y);
        if (P(y) == z) {
            xp = y;
        } else {
            xp = P(y);
            transplant(t, y, R(y));
            R(y) = R(z);
            P(R(y)) = y;
        }
        transplant(t, z, y);
        L(y) = L(z);
        P(L(y)) = y;
        y->red = z->red;
    }
    t->count--;
    if (!removed_red) remove_fixup(t, x, xp);
}

vram_pool_block_t *vram_free_tree_lower_bound(const vram_free_tree_t *t, uintptr_t stream,
                                              uint64_t rank)
{
    vram_pool_block_t *cur = t->root, *best = NULL;
    while (cur) {
        bool below = cur->stream < stream || (cur->stream == stream && cur->u.node.rank < rank);
        if (below) {
            cur = R(cur);
        } else {
            best = cur;
            cur = L(cur);
        }
    }
    return best && best->stream == stream ? best : NULL;
}

vram_pool_block_t *vram_free_tree_first(const vram_free_tree_t *t)
{
    return t->root ? minimum(t->root) : NULL;
}

vram_pool_block_t *vram_free_tree_next(const vram_pool_block_t *b)
{
    if (R(b)) return minimum(R(b));
    const vram_pool_block_t *cur = b;
    vram_pool_block_t *p = P(cur);
    while (p && cur == R(p)) {
        cur = p;
        p = P(p);
    }
    return p;
}

vram_pool_block_t *vram_free_tree_last_of(const vram_free_tree_t *t, uintptr_t stream)
{
    vram_pool_block_t *cur = t->root, *best = NULL;
    while (cur) {
        if (cur->stream <= stream) {
            if (cur->stream == stream) best = cur;
            cur = R(cur);
        } else {
            cur = L(cur);
        }
    }
    return best;
}

static int check_node(const vram_pool_block_t *b, const vram_pool_block_t *lo,
                      const vram_pool_block_t *hi, size_t *count, char *err, size_t len)
{
    if (!b) return 1;
    (*count)++;
    if (b->allocated) {
        snprintf(err, len, "allocated block 0x%zx in the free tree", (size_t)b->addr);
        return -1;
    }
    if ((lo && key_cmp(lo, b) >= 0) || (hi && key_cmp(b, hi) >= 0)) {
        snprintf(err, len, "free tree out of order at block 0x%zx", (size_t)b->addr);
        return -1;
    }
    if ((L(b) && P(L(b)) != b) || (R(b) && P(R(b)) != b)) {
        snprintf(err, len, "bad parent link below block 0x%zx", (size_t)b->addr);
        return -1;
    }
    if (b->red && (is_red(L(b)) || is_red(R(b)))) {
        snprintf(err, len, "red block 0x%zx has a red child", (size_t)b->addr);
        return -1;
    }
    int lh = check_node(L(b), lo, b, count, err, len);
    if (lh < 0) return -1;
    int rh = check_node(R(b), b, hi, count, err, len);
    if (rh < 0) return -1;
    if (lh != rh) {
        snprintf(err, len, "unequal black heights below block 0x%zx", (size_t)b->addr);
        return -1;
    }
    return lh + (b->red ? 0 : 1);
}

int vram_free_tree_check(const vram_free_tree_t *t, char *err, size_t len)
{
    if (t->root && (t->root->red || P(t->root))) {
        snprintf(err, len, "free tree root is red or has a parent");
        return -1;
    }
    size_t count = 0;
    int h = check_node(t->root, NULL, NULL, &count, err, len);
    if (h >= 0 && count != t->count) {
        snprintf(err, len, "free tree holds %zu blocks but counts %zu", count, t->count);
        return -1;
    }
    return h;
}
