//! Every federation decision as a pure function over plain data: no IO, no async.
