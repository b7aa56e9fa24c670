package org.springframework.samples.kilnshop;

import org.springframework.stereotype.Component;

/** The page body's owner: the same row again. */
@Component
public class OwnerDetails {
    private final OwnerRepository owners;

    OwnerDetails(OwnerRepository owners) {
        this.owners = owners;
    }

    String details(long id) {
        Owner owner = owners.load(id); // kiln: second load
        return owner.getLastName() + " #" + owner.getId();
    }
}
