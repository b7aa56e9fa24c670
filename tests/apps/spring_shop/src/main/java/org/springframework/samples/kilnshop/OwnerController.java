package org.springframework.samples.kilnshop;

import java.util.List;
import org.springframework.data.domain.Sort;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.RestController;

@RestController
public class OwnerController {
    private final OwnerRepository owners;
    private final OwnerHeader header;
    private final OwnerDetails details;

    OwnerController(OwnerRepository owners, OwnerHeader header, OwnerDetails details) {
        this.owners = owners;
        this.header = header;
        this.details = details;
    }

    /** Every owner with its number of pets: 1 query, then one per owner (the N+1). */
    @GetMapping("/owners")
    public String list() {
        List<Owner> all = owners.findAll(Sort.by("id"));
        StringBuilder out = new StringBuilder();
        for (Owner owner : all) {
            int pets = owner.getPets().size(); // kiln: the N+1 loop
            out.append(owner.getLastName()).append(' ').append(pets).append('\n');
        }
        return out.toString();
    }

    /** One owner, loaded twice by the header and the details. */
    @GetMapping("/owners/{id}")
    public String show(@PathVariable("id") long id) {
        return header.title(id) + "\n" + details.details(id) + "\n";
    }
}
