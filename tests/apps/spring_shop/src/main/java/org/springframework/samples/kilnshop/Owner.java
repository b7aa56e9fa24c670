package org.springframework.samples.kilnshop;

import jakarta.persistence.Entity;
import jakarta.persistence.FetchType;
import jakarta.persistence.GeneratedValue;
import jakarta.persistence.Id;
import jakarta.persistence.OneToMany;
import java.util.ArrayList;
import java.util.List;

@Entity
public class Owner {
    @Id
    @GeneratedValue
    private Long id;

    private String lastName;

    // Lazy: each owner's pets are loaded when first touched, one query per owner.
    @OneToMany(mappedBy = "owner", fetch = FetchType.LAZY)
    private List<Pet> pets = new ArrayList<>();

    protected Owner() {}

    Owner(String lastName) {
        this.lastName = lastName;
    }

    public Long getId() {
        return id;
    }

    public String getLastName() {
        return lastName;
    }

    public List<Pet> getPets() {
        return pets;
    }
}
