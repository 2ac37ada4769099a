"""behest's HTTP doors on the HTTP listener (`http_listen`): Connect and gRPC-Web
(connect.py), plain server-sent events (sse.py), AG-UI. Each door translates; every operation it
reaches is api/'s one implementation, under the same auth, tenants, limits and error table.
"""
