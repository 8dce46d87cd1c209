/*
 * permessage-deflate (RFC 7692), offered when ftws_config.permessage_deflate is set: the
 * extension table lws is given, and a thin layer over lws's own extension callback that counts
 * the bytes it really puts on the wire. Sits beside ftws_frame.c at the bottom of the layers:
 * it reads the server's counters and calls nothing of ours.
 *
 * How lws 4.1.6 runs the extension (lib/roles/ws/ext/extension-permessage-deflate.c, ops-ws.c),
 * and what our write path does about it (ftws_queue.c):
 * - lws_write of a data message deflates it into a per-connection buffer of tx_buf_size bytes
 *   and sends that as the first fragment. When the message does not fit, lws sends the rest as
 *   CONTINUATION fragments from later POLLOUTs by itself, and does not call our WRITEABLE until
 *   the last one is out. zlib keeps reading the rest of the message from *our* buffer during
 *   those POLLOUTs, so the buffer handed to lws_write must live until our next WRITEABLE (the
 *   connection's in-flight frame), and the shared batch buffer cannot be used.
 * - The frame header goes into that deflate buffer, not into our LWS_PRE headroom: a shared
 *   frame's headroom is written only by connections that send it uncompressed.
 * - Received compressed messages reach us inflated, in pieces of at most the rx buffer size
 *   (and possibly empty ones), with first/final flags as for any fragmented message; the
 *   remaining-length lws reports is compressed bytes still to come.
 */
#include "ftws_internal.h"

#include <stdio.h>

/* log2 of the deflate output buffer lws allocates per compressing connection (its default is
 * 10, 1 KB). Every buffer's worth of compressed output is one fragment and one trip through the
 * event loop, so a big message would otherwise cost dozens of POLLOUTs; 16 KB keeps most
 * messages (a batch is at most max_batch_bytes before compression) in one or two fragments. */
#define FTWS_DEFLATE_TX_BUF_PWR2 14

/* lws's callback does the work; this one only counts what it hands to the socket. Called on the
 * service thread for connections that negotiated the extension. */
static int deflate_callback(struct lws_context *context, const struct lws_extension *ext,
                            struct lws *wsi, enum lws_extension_callback_reasons reason, void *user,
                            void *in, size_t len)
{
    int n = lws_extension_callback_pm_deflate(context, ext, wsi, reason, user, in, len);
    if (reason == LWS_EXT_CB_PACKET_TX_PRESEND && n >= 0 && in) {
        /* A whole frame as it goes to the socket, header included. lws passes control frames
         * through here too; only data frames (text, binary, continuation) are counted, as for
         * uncompressed connections. */
        const struct lws_tokens *frame = in;
        if (frame->token && frame->len > 0 && (frame->token[0] & 0x08) == 0) {
            ftws_server *s = ftws__server_from_wsi(wsi);
            if (s)
                s->written.bytes += (uint64_t)frame->len;
        }
    }
    return n;
}

/* The offer string is what a client would send; a server only uses the name, and answers each
 * client's own offer (lws accepts its no_context_takeover parameters and leaves the window
 * sizes at 15 bits, which RFC 7692 allows when the client asks for no limit). */
static const struct lws_extension deflate_extensions[] = {
    {"permessage-deflate", deflate_callback, "permessage-deflate; client_max_window_bits"},
    {NULL, NULL, NULL},
};

const struct lws_extension *ftws__deflate_extensions(void)
{
    return deflate_extensions;
}

bool ftws__deflate_setup(struct lws *wsi)
{
    char pwr2[8];
    snprintf(pwr2, sizeof(pwr2), "%d", FTWS_DEFLATE_TX_BUF_PWR2);
    /* -1 when the extension is not active on this connection: that is the test. */
    return lws_set_extension_option(wsi, "permessage-deflate", "tx_buf_size", pwr2) == 0;
}

/* Header bytes lws puts in front of an uncompressed server frame (never masked). */
size_t ftws__ws_header_len(size_t payload_len)
{
    return payload_len < 126 ? 2 : payload_len < 65536 ? 4 : 10;
}
