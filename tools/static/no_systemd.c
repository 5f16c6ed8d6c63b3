/*
 * Linked only into `make static`'s programs, and only where no
 * libsystemd.a exists (Debian ships none): sd_notify(3) as it behaves
 * without $NOTIFY_SOCKET, sending nothing and returning 0. Static programs
 * are for benchmarks on machines that lack the libraries, not for systemd
 * units with Type=notify (such a unit would never see READY=1).
 */
#include <systemd/sd-daemon.h>

int sd_notify(int unset_environment, const char *state)
{
	(void)unset_environment;
	(void)state;
	return 0;
}

int sd_notifyf(int unset_environment, const char *format, ...)
{
	(void)unset_environment;
	(void)format;
	return 0;
}
