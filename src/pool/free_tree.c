/* Red-black tree of free blocks, intrusive (the links live in the block, as
 * 32-bit block ids). Ordered by (rank, tie, address): best fit is the first
 * block at or after the rank of the request, one O(log n) descent. A block's
 * rank is computed from its size (see vram_tree_rank), so it needs no field. */
#include "pool/pool_internal.h"

#include <stdio.h>

#define AT(id)      ((id) ? c->base + (id) : NULL)
#define L(b)        AT((b)->u.node.left)
#define R(b)        AT((b)->u.node.right)
#define P(b)        AT((b)->u.node.parent)
#define ID(x)       ((x) ? (vram_block_id_t)((x)-c->base) : 0)
#define SET_L(b, x) ((b)->u.node.left = ID(x))
#define SET_R(b, x) ((b)->u.node.right = ID(x))
#define SET_P(b, x) ((b)->u.node.parent = ID(x))

static int key_cmp(const vram_tree_ctx_t *c, const vram_pool_block_t *a, const vram_pool_block_t *b)
{
    uint64_t ra = vram_tree_rank(c, a->size), rb = vram_tree_rank(c, b->size);
    if (ra != rb) return ra < rb ? -1 : 1;
    if (a->seg_seq != b->seg_seq) return a->seg_seq < b->seg_seq ? -1 : 1;
    if (a->addr != b->addr) return a->addr < b->addr ? -1 : 1;
    return 0;
}

static bool is_red(const vram_pool_block_t *b)
{
    return b && b->red;
}

static void set_root(const vram_tree_ctx_t *c, vram_free_tree_t *t, vram_pool_block_t *b)
{
    t->root = ID(b);
}

static void rotate_left(const vram_tree_ctx_t *c, vram_free_tree_t *t, vram_pool_block_t *x)
{
    vram_pool_block_t *y = R(x);
    vram_pool_block_t *yl = L(y), *xp = P(x);
    x->u.node.right = y->u.node.left;
    if (yl) SET_P(yl, x);
    y->u.node.parent = x->u.node.parent;
    if (!xp)
        set_root(c, t, y);
    else if (xp->u.node.left == ID(x))
        SET_L(xp, y);
    else
        SET_R(xp, y);
    SET_L(y, x);
    SET_P(x, y);
}

static void rotate_right(const vram_tree_ctx_t *c, vram_free_tree_t *t, vram_pool_block_t *x)
{
    vram_pool_block_t *y = L(x);
    vram_pool_block_t *yr = R(y), *xp = P(x);
    x->u.node.left = y->u.node.right;
    if (yr) SET_P(yr, x);
    y->u.node.parent = x->u.node.parent;
    if (!xp)
        set_root(c, t, y);
    else if (xp->u.node.right == ID(x))
        SET_R(xp, y);
    else
        SET_L(xp, y);
    SET_R(y, x);
    SET_P(x, y);
}

void vram_free_tree_insert(const vram_tree_ctx_t *c, vram_free_tree_t *t, vram_pool_block_t *b)
{
    vram_pool_block_t *parent = NULL, *cur = AT(t->root);
    int cmp = 0;
    while (cur) {
        parent = cur;
        cmp = key_cmp(c, b, cur);
        cur = cmp < 0 ? L(cur) : R(cur);
    }
    b->u.node.left = b->u.node.right = 0;
    SET_P(b, parent);
    b->red = true;
    if (!parent)
        set_root(c, t, b);
    else if (cmp < 0)
        SET_L(parent, b);
    else
        SET_R(parent, b);
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
                rotate_left(c, t, p);
                x = p;
                p = P(x);
            }
            p->red = false;
            g->red = true;
            rotate_right(c, t, g);
        } else {
            vram_pool_block_t *u = L(g);
            if (is_red(u)) {
                p->red = u->red = false;
                g->red = true;
                x = g;
                continue;
            }
            if (x == L(p)) {
                rotate_right(c, t, p);
                x = p;
                p = P(x);
            }
            p->red = false;
            g->red = true;
            rotate_left(c, t, g);
        }
    }
    AT(t->root)->red = false;
}

static void transplant(const vram_tree_ctx_t *c, vram_free_tree_t *t, vram_pool_block_t *u,
                       vram_pool_block_t *v)
{
    vram_pool_block_t *up = P(u);
    if (!up)
        set_root(c, t, v);
    else if (u == L(up))
        SET_L(up, v);
    else
        SET_R(up, v);
    if (v) v->u.node.parent = u->u.node.parent;
}

static vram_pool_block_t *minimum(const vram_tree_ctx_t *c, vram_pool_block_t *b)
{
    while (b->u.node.left)
        b = L(b);
    return b;
}

static vram_pool_block_t *maximum(const vram_tree_ctx_t *c, vram_pool_block_t *b)
{
    while (b->u.node.right)
        b = R(b);
    return b;
}

/* Rebalances after removing a black node; x (maybe NULL) took its place under xp. */
static void remove_fixup(const vram_tree_ctx_t *c, vram_free_tree_t *t, vram_pool_block_t *x,
                         vram_pool_block_t *xp)
{
    while (x != AT(t->root) && !is_red(x)) {
        if (x == L(xp)) {
            vram_pool_block_t *w = R(xp);
            if (is_red(w)) {
                w->red = false;
                xp->red = true;
                rotate_left(c, t, xp);
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
                    rotate_right(c, t, w);
                    w = R(xp);
                }
                w->red = xp->red;
                xp->red = false;
                R(w)->red = false;
                rotate_left(c, t, xp);
                x = AT(t->root);
                break;
            }
        } else {
            vram_pool_block_t *w = L(xp);
            if (is_red(w)) {
                w->red = false;
                xp->red = true;
                rotate_right(c, t, xp);
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
                    rotate_left(c, t, w);
                    w = L(xp);
                }
                w->red = xp->red;
                xp->red = false;
                L(w)->red = false;
                rotate_right(c, t, xp);
                x = AT(t->root);
                break;
            }
        }
    }
    if (x) x->red = false;
}

void vram_free_tree_remove(const vram_tree_ctx_t *c, vram_free_tree_t *t, vram_pool_block_t *z)
{
    vram_pool_block_t *x, *xp;
    bool removed_red = z->red;
    if (!z->u.node.left) {
        x = R(z);
        xp = P(z);
        transplant(c, t, z, x);
    } else if (!z->u.node.right) {
        x = L(z);
        xp = P(z);
        transplant(c, t, z, x);
    } else {
        vram_pool_block_t *y = minimum(c, R(z));
        removed_red = y->red;
        x = R(y);
        if (P(y) == z) {
            xp = y;
        } else {
            xp = P(y);
            transplant(c, t, y, x);
            y->u.node.right = z->u.node.right;
            SET_P(R(y), y);
        }
        transplant(c, t, z, y);
        y->u.node.left = z->u.node.left;
        SET_P(L(y), y);
        y->red = z->red;
    }
    t->count--;
    if (!removed_red) remove_fixup(c, t, x, xp);
}

vram_pool_block_t *vram_free_tree_lower_bound(const vram_tree_ctx_t *c, const vram_free_tree_t *t,
                                              uint64_t rank)
{
    vram_pool_block_t *cur = AT(t->root), *best = NULL;
    while (cur) {
        if (vram_tree_rank(c, cur->size) < rank) {
            cur = R(cur);
        } else {
            best = cur;
            cur = L(cur);
        }
    }
    return best;
}

vram_pool_block_t *vram_free_tree_first(const vram_tree_ctx_t *c, const vram_free_tree_t *t)
{
    return t->root ? minimum(c, AT(t->root)) : NULL;
}

vram_pool_block_t *vram_free_tree_last(const vram_tree_ctx_t *c, const vram_free_tree_t *t)
{
    return t->root ? maximum(c, AT(t->root)) : NULL;
}

vram_pool_block_t *vram_free_tree_next(const vram_tree_ctx_t *c, const vram_pool_block_t *b)
{
    if (b->u.node.right) return minimum(c, R(b));
    const vram_pool_block_t *cur = b;
    vram_pool_block_t *p = P(cur);
    while (p && cur == R(p)) {
        cur = p;
        p = P(p);
    }
    return p;
}

static int check_node(const vram_tree_ctx_t *c, const vram_pool_block_t *b,
                      const vram_pool_block_t *lo, const vram_pool_block_t *hi, size_t *count,
                      char *err, size_t len)
{
    if (!b) return 1;
    if (++*count > c->blocks->used + c->blocks->homed) {
        snprintf(err, len, "free tree has a cycle");
        return -1;
    }
    if (b->allocated) {
        snprintf(err, len, "allocated block 0x%zx in the free tree", (size_t)b->addr);
        return -1;
    }
    if ((lo && key_cmp(c, lo, b) >= 0) || (hi && key_cmp(c, b, hi) >= 0)) {
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
    int lh = check_node(c, L(b), lo, b, count, err, len);
    if (lh < 0) return -1;
    int rh = check_node(c, R(b), b, hi, count, err, len);
    if (rh < 0) return -1;
    if (lh != rh) {
        snprintf(err, len, "unequal black heights below block 0x%zx", (size_t)b->addr);
        return -1;
    }
    return lh + (b->red ? 0 : 1);
}

int vram_free_tree_check(const vram_tree_ctx_t *c, const vram_free_tree_t *t, char *err, size_t len)
{
    vram_pool_block_t *root = AT(t->root);
    if (root && (root->red || root->u.node.parent)) {
        snprintf(err, len, "free tree root is red or has a parent");
        return -1;
    }
    size_t count = 0;
    int h = check_node(c, root, NULL, NULL, &count, err, len);
    if (h >= 0 && count != t->count) {
        snprintf(err, len, "free tree holds %zu blocks but counts %zu", count, (size_t)t->count);
        return -1;
    }
    return h;
}
