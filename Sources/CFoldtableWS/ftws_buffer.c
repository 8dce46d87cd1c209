#include "ftws_buffer.h"

#include <stdlib.h>

int ftws__buffer_reserve(uint8_t **buf, size_t *cap, size_t need, size_t initial, size_t limit)
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
