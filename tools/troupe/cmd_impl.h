/* troupe — the `troupe` command's subcommands (tools/troupe/main.c dispatches to them; not
 * installed). Each takes main's argc/argv with argv[1] the command's name and returns the
 * process's exit status (0 success, 1 failure, 2 usage error).
 * Thread safety: main thread only. */
#ifndef TROUPE_TOOLS_CMD_IMPL_H
#define TROUPE_TOOLS_CMD_IMPL_H

int troupe__cmd_doctor(int argc, char **argv); /* cmd_doctor.c: preflight checks */
int troupe__cmd_plot(int argc, char **argv);   /* cmd_plot.c: learning curve CSV -> PNG */
int troupe__cmd_trace(int argc, char **argv);  /* cmd_trace.c: troupe trace merge */
int troupe__cmd_run(int argc, char **argv); /* cmd_run.c: elastic runs, restarts */
int troupe__cmd_status(int argc, char **argv); /* cmd_status.c: the hang doctor */

#endif
