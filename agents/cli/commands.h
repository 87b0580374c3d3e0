/*
 * The `pincer` command's subcommands, one per cli/cmd_*.c. Each runs with
 * its own argv (argv[0] is the subcommand's name) and returns the process
 * exit status: 0 success, 1 failure, 2 bad usage.
 */
#ifndef PC_AGENTS_CLI_COMMANDS_H
#define PC_AGENTS_CLI_COMMANDS_H

int pc_cmd_mock_llm(int argc, char **argv);
int pc_cmd_agent(int argc, char **argv);
int pc_cmd_config(int argc, char **argv);
int pc_cmd_gateway(int argc, char **argv);

#endif
