// libcurl 7.88 as Debian 12 ships it (libcurl4-openssl-dev), for webhook POSTs. Only
// FoldtableWebhook imports it.
//
// Chosen over libwebsockets' own client: Debian's lws 4.1.6 has no asynchronous DNS, so its
// client would block the one service thread in getaddrinfo; curl's multi interface runs on a
// thread of its own, with its threaded resolver, bounded timeouts and a socket-open hook that
// sees the resolved address (the SSRF check after DNS).
#include <curl/curl.h>

// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call: one typed
// wrapper per kind of argument Foldtable passes.
static inline CURLcode ftcurl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ftcurl_setopt_pointer(CURL *handle, CURLoption option, const void *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode ftcurl_setopt_opensocket(CURL *handle, curl_opensocket_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_OPENSOCKETFUNCTION, callback);
}

static inline CURLcode ftcurl_setopt_write(CURL *handle, curl_write_callback callback) {
    return curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, callback);
}

// curl_multi_setopt is variadic too.
static inline CURLMcode ftcurl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}

static inline CURLcode ftcurl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLcode ftcurl_getinfo_pointer(CURL *handle, CURLINFO info, char **value) {
    return curl_easy_getinfo(handle, info, value);
}
