// The schemes whose exact bits per number `micro plate` puts beside the plate's arithmetic (panel
// (c)). The plate measures each on one head's conversation, which gives the model's bits per number
// only for a scheme that codes each head on its own (no outliers or sinks chosen across the heads):
// tests/test_capacity.c holds every one of these to that.
#ifndef MICRO_PLATE_CAPACITY_H
#define MICRO_PLATE_CAPACITY_H

#define PLATE_CAPACITY_SCHEMES 5
extern const char *const plate_capacity_schemes[PLATE_CAPACITY_SCHEMES];

#endif
