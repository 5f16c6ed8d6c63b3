/* The handshake's options (handshake.c), for the socket thread (server.c). */
#ifndef NBDD_HANDSHAKE_H
#define NBDD_HANDSHAKE_H

#include <stdbool.h>
#include <stdint.h>

#include "conn.h"

/* Answers one option; false when the connection must close (an unknown
 * export named by EXPORT_NAME). */
bool handshake_option(struct conn *c, const struct server_ops *up, const struct nbd_option *opt,
		      const uint8_t *data);

#endif
