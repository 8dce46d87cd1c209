// OpenSSL 3.0's libcrypto as Debian ships it (libssl-dev), for HMAC-SHA256 and constant-time
// comparison. Only FoldtableAuth imports it.
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
