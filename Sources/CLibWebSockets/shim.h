// libwebsockets 4.1.6 as Debian ships it. Only CFoldtableWS includes it; Swift code never does.
#include <libwebsockets.h>
