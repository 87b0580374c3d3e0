/*
 * mock: the mock model server, OpenAI- and Anthropic-compatible, every
 * answer scripted. This is the part's one public header.
 *
 *   mock_server.h  the server on the I/O layer, its endpoints and options
 *   scenario.h     the scripts it plays (docs/mock-llm.md)
 *
 * Ownership and threads: as mock_server.h states.
 */
#ifndef PINCER_AGENTS_MOCK_MOCK_H
#define PINCER_AGENTS_MOCK_MOCK_H

#include "mock_server.h"
#include "scenario.h"

#endif
