package org.springframework.samples.kilnshop;

import org.springframework.stereotype.Component;

/** The page header's owner. */
@Component
public class OwnerHeader {
    private final OwnerRepository owners;

    OwnerHeader(OwnerRepository owners) {
        this.owners = owners;
    }

    String title(long id) {
        return owners.load(id).getLastName(); // kiln: first load
    }
}
