// A TCP rendezvous for transports that need one shared secret before they can talk (NCCL's
// unique id): rank 0 serves it on MASTER_ADDR:MASTER_PORT (that address only) to clients that
// first send the job's token (FLOWGRAD_RENDEZVOUS_TOKEN); the other ranks fetch it.
#pragma once
#include <string>

#include "flowgrad/core/env.h"

namespace fg::dist {

// Rank 0 passes its `secret` and gets it back; other ranks get rank 0's. Raises a Timeout error
// naming the address when the exchange does not happen within `timeout_s` seconds, and a Value
// error when a job of several ranks has no token of at least 16 characters.
std::string rendezvous(const env::JobRank& job, const std::string& secret, double timeout_s);

}  // namespace fg::dist
