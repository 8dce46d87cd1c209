#include "CFoldtableWSCommon.h"

#include <stdlib.h>
#include <string.h>

int ftws_buffer_reserve(uint8_t **buf, size_t *cap, size_t need, size_t initial, size_t limit)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : (initial < limit ? initial : limit);
    while (ncap < need)
        ncap = ncap > limit / 2 ? limit : ncap * 2;
    uint8_t *nb = realloc(*buf, ncap);
    if (!nb)
        return -1;
    *buf = nb;
    *cap = ncap;
    return 0;
}

size_t ftws_utf8_truncate(char *dst, const char *text, size_t max)
{
    size_t n = text ? strlen(text) : 0;
    if (n > max) {
        n = max;
        /* Back off continuation bytes: the cut then falls before a sequence's lead byte. */
        while (n && ((unsigned char)text[n] & 0xC0) == 0x80)
            n--;
    }
    if (n)
        memcpy(dst, text, n);
    dst[n] = '\0';
    return n;
}
