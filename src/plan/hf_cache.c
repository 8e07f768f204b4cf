/* `--hf-config org/name`: the config.json of a hub model from the local
 * Hugging Face cache, offline (huggingface_hub's layout:
 * $HF_HUB_CACHE or $HF_HOME/hub or ~/.cache/huggingface/hub, then
 * models--org--name/snapshots/<revision>/config.json; refs/main names the
 * revision the hub last served). */
#include "vram.h"
#include "core/file.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* A hub id is "name" or "org/name" of [A-Za-z0-9._-], no "..". */
static bool valid_id(const char *id)
{
    size_t len = strlen(id), slashes = 0;
    if (len == 0 || len > 96 || strstr(id, "..") || id[0] == '/' || id[len - 1] == '/')
        return false;
    for (const char *c = id; *c; c++) {
        if (*c == '/') {
            slashes++;
            continue;
        }
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '.' || *c == '_' || *c == '-'))
            return false;
    }
    return slashes <= 1;
}

static int hub_dir(char *out, size_t len)
{
    const char *cache = getenv("HF_HUB_CACHE"), *home = getenv("HF_HOME"), *user = getenv("HOME");
    int n;
    if (cache && *cache)
        n = snprintf(out, len, "%s", cache);
    else if (home && *home)
        n = snprintf(out, len, "%s/hub", home);
    else if (user && *user)
        n = snprintf(out, len, "%s/.cache/huggingface/hub", user);
    else
        return vram_fail(VRAM_ENOENT, "no Hugging Face cache: set HF_HUB_CACHE or HF_HOME");
    if (n < 0 || (size_t)n >= len)
        return vram_fail(VRAM_EINVAL, "Hugging Face cache path too long");
    return 0;
}

int vram_hf_cache_config(const char *hub_id, char *path, size_t len)
{
    if (!hub_id || !path || len == 0)
        return vram_fail(VRAM_EINVAL, "vram_hf_cache_config: NULL argument");
    if (!valid_id(hub_id))
        return vram_fail(VRAM_EINVAL, "\"%s\" is neither a file nor a hub id (org/name)", hub_id);
    char hub[2048], repo[2300], ref[2400];
    int rc = hub_dir(hub, sizeof hub);
    if (rc) return rc;
    /* models--org--name */
    char flat[200];
    size_t o = 0;
    for (const char *c = hub_id; *c && o + 3 < sizeof flat; c++) {
        if (*c == '/') {
            flat[o++] = '-';
            flat[o++] = '-';
        } else {
            flat[o++] = *c;
        }
    }
    flat[o] = '\0';
    snprintf(repo, sizeof repo, "%s/models--%s", hub, flat);
    /* the revision refs/main points at, else any snapshot holding a config */
    snprintf(ref, sizeof ref, "%s/refs/main", repo);
    char *rev = NULL;
    size_t rlen;
    if (vram_read_file(ref, 256, &rev, &rlen) == 0) {
        rev[strcspn(rev, "\r\n")] = '\0';
        bool ok = rev[0] && !strchr(rev, '/') && strcmp(rev, ".") && strcmp(rev, "..");
        if (ok && (size_t)snprintf(path, len, "%s/snapshots/%s/config.json", repo, rev) < len &&
            is_file(path)) {
            free(rev);
            return 0;
        }
        free(rev);
    }
    vram_clear_error();
    char snaps[2400];
    snprintf(snaps, sizeof snaps, "%s/snapshots", repo);
    DIR *d = opendir(snaps);
    if (d) {
        struct dirent *ent;
        while ((ent = readdir(d))) {
            if (ent->d_name[0] == '.') continue;
            if ((size_t)snprintf(path, len, "%s/%s/config.json", snaps, ent->d_name) < len &&
                is_file(path)) {
                closedir(d);
                return 0;
            }
        }
        closedir(d);
    }
    return vram_fail(VRAM_ENOENT,
                     "%s is not in the local Hugging Face cache (%s); vram does not download: "
                     "run `huggingface-cli download %s config.json` or give the file's path",
                     hub_id, hub, hub_id);
}
