"""Stage 2, decide: code's next step from the reading and the session state, one decision of a closed set."""
