// The ranks agree on one outcome before work starts: each rank passes the problem it found ("" for
// none), and every rank learns the first failing rank's message. Rank 0 then prints it once and all
// ranks leave with the same status, instead of one rank aborting the others mid-collective.
#pragma once
#include <string>

#include "parallel/communicator.h"

namespace gf {

// Collective over `world`. Returns "" when no rank had a problem, else the message of the lowest
// failing rank, prefixed "on rank N: " when N is not 0.
std::string first_problem(const Communicator& world, const std::string& mine);

}  // namespace gf
